package io.mcore4j.core;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;

/**
 * This process's resident memory as Linux counts it: the resident set ({@code VmRSS} of {@code /proc/self/status})
 * and its peak ({@code VmHWM}) since the last {@link #resetPeak()} (a write of 5 to {@code /proc/self/clear_refs}).
 * The one reader of those counters: training's log line, the planner's memory tests and the MoE memory benchmark.
 * With glibc's mmap threshold pinned ({@code MALLOC_MMAP_THRESHOLD_=65536}) every tensor of 64 KiB or more is a
 * mapping of its own, unmapped when libtorch frees it, so a run's peak less the resident set before it is the peak
 * of the native memory the run held.
 */
public final class ResidentMemory {
    private static final Path STATUS = Path.of("/proc/self/status");
    private static final Path CLEAR_REFS = Path.of("/proc/self/clear_refs");

    private ResidentMemory() {}

    /** @return whether this platform has the counters and the peak's reset (Linux with a writable clear_refs) */
    public static boolean available() {
        return Files.isWritable(CLEAR_REFS) && Files.isReadable(STATUS);
    }

    /**
     * Resets the peak to the current resident set.
     *
     * @throws UncheckedIOException if clear_refs cannot be written
     */
    public static void resetPeak() {
        try {
            Files.writeString(CLEAR_REFS, "5");
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** @return bytes resident now, or -1 where the counter cannot be read */
    public static long resident() {
        return field("VmRSS:");
    }

    /** @return the peak resident bytes since {@link #resetPeak()}, or -1 where the counter cannot be read */
    public static long peak() {
        return field("VmHWM:");
    }

    private static long field(String name) {
        try {
            for (String line : Files.readAllLines(STATUS)) {
                if (line.startsWith(name)) {
                    return Long.parseLong(line.substring(name.length()).replace("kB", "").trim()) * 1024;
                }
            }
        } catch (IOException | RuntimeException e) {
            return -1;
        }
        return -1;
    }
}
