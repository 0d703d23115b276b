package io.mcore4j.data.preprocess;

import java.io.PrintStream;
import java.util.Locale;

/**
 * A one-line progress display for a console: share of the input read, documents and megabytes (10^6 bytes)
 * done, and their rates since the start. Redraws at most every {@code intervalNanos}; not thread-safe.
 */
final class ProgressBar {
    private static final int WIDTH = 24;

    private final PrintStream out;
    private final long totalBytes;
    private final long intervalNanos;
    private final long start = System.nanoTime();
    private long lastDraw;

    ProgressBar(PrintStream out, long totalBytes, long intervalNanos) {
        this.out = out;
        this.totalBytes = totalBytes;
        this.intervalNanos = intervalNanos;
    }

    void update(long documents, long bytes) {
        long now = System.nanoTime();
        if (now - lastDraw >= intervalNanos) {
            lastDraw = now;
            out.print("\r" + line(documents, bytes, now));
            out.flush();
        }
    }

    void finish(long documents, long bytes) {
        out.println("\r" + line(documents, bytes, System.nanoTime()));
        out.flush();
    }

    String line(long documents, long bytes, long now) {
        double seconds = Math.max(1e-9, (now - start) / 1e9);
        double share = totalBytes > 0 ? Math.min(1.0, (double) bytes / totalBytes) : 1.0;
        int filled = (int) Math.round(share * WIDTH);
        return String.format(Locale.ROOT, "[%s%s] %5.1f%% | %,d docs | %,.0f docs/s | %,.1f MB | %,.1f MB/s",
                "#".repeat(filled), "-".repeat(WIDTH - filled), 100 * share, documents, documents / seconds,
                bytes / 1e6, bytes / 1e6 / seconds);
    }
}
