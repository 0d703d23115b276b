package io.mcore4j.data.progress;

import java.io.PrintStream;
import java.util.Locale;

/**
 * The project's one progress bar: a single line redrawn in place ({@code \r}) showing the share
 * done, done/total in a unit, the rate since the start and a caller's suffix. Meant for interactive
 * terminals only: callers create one when {@code System.console() != null} and print plain lines
 * otherwise. Redraws at most every {@code intervalNanos}; not thread-safe.
 */
public final class ProgressBar {
    private static final int WIDTH = 24;

    private final PrintStream out;
    private final String unit;
    private final long intervalNanos;
    private final long start = System.nanoTime();
    private long lastDraw = Long.MIN_VALUE;
    private String shown = "";
    private long done;
    private long total;
    private String suffix = "";

    /**
     * @param out the terminal's stream
     * @param unit what is counted ("iterations", "MB")
     * @param intervalNanos the shortest time between two redraws
     */
    public ProgressBar(PrintStream out, String unit, long intervalNanos) {
        this.out = out;
        this.unit = unit;
        this.intervalNanos = intervalNanos;
    }

    /**
     * Records progress and redraws if the interval has passed.
     *
     * @param done units done
     * @param total units in all (0 or less when unknown)
     * @param suffix extra text after the counts, may be empty
     */
    public void update(long done, long total, String suffix) {
        this.done = done;
        this.total = total;
        this.suffix = suffix;
        long now = System.nanoTime();
        if (lastDraw == Long.MIN_VALUE || now - lastDraw >= intervalNanos || done >= total && total > 0) {
            lastDraw = now;
            redraw();
        }
    }

    /** Draws the bar again with the last recorded progress (after other lines were printed). */
    public void redraw() {
        shown = line(done, total, suffix, System.nanoTime());
        out.print("\r" + shown);
        out.flush();
    }

    /** Erases the bar's line so that a normal line can be printed in its place. */
    public void clear() {
        if (!shown.isEmpty()) {
            out.print("\r" + " ".repeat(shown.length()) + "\r");
            out.flush();
            shown = "";
        }
    }

    /** Draws the final state and ends the line. */
    public void finish() {
        out.println("\r" + line(done, total, suffix, System.nanoTime()));
        out.flush();
        shown = "";
    }

    /**
     * The bar's text.
     *
     * @param done units done
     * @param total units in all, or 0 or less when unknown
     * @param suffix extra text, may be empty
     * @param now {@link System#nanoTime()} now
     * @return e.g. {@code [##########--------------]  41.7% | 50/120 iterations | 3.2 iterations/s}
     */
    public String line(long done, long total, String suffix, long now) {
        double seconds = Math.max(1e-9, (now - start) / 1e9);
        double share = total > 0 ? Math.min(1.0, (double) done / total) : 1.0;
        int filled = (int) Math.round(share * WIDTH);
        return String.format(Locale.ROOT, "[%s%s] %5.1f%% | %,d%s %s | %,.1f %s/s%s", "#".repeat(filled),
                "-".repeat(WIDTH - filled), 100 * share, done, total > 0 ? String.format(Locale.ROOT, "/%,d", total) : "",
                unit, done / seconds, unit, suffix.isEmpty() ? "" : " | " + suffix);
    }
}
