package io.mcore4j.planner;

import io.mcore4j.core.ResidentMemory;

/**
 * The process's resident memory as Linux counts it ({@code VmRSS}) and its peak since the last
 * {@link #reset} ({@code VmHWM}, reset through {@code /proc/self/clear_refs}). With glibc's mmap
 * threshold pinned (the planner's surefire configuration) every tensor of 64 KiB or more is a
 * mapping of its own that is unmapped when libtorch frees it, so the peak of the resident set over
 * a run, less the resident set before it, is the peak of the native memory the run held.
 */
final class NativePeak {
    private NativePeak() {}

    /** @return whether this platform has the counters (Linux with a writable clear_refs) */
    static boolean available() {
        return ResidentMemory.available() && "65536".equals(System.getenv("MALLOC_MMAP_THRESHOLD_"));
    }

    /** Resets the peak to the current resident set. */
    static void reset() {
        ResidentMemory.resetPeak();
    }

    /** @return bytes resident now */
    static long resident() {
        return counted("VmRSS", ResidentMemory.resident());
    }

    /** @return the peak resident bytes since {@link #reset} */
    static long peak() {
        return counted("VmHWM", ResidentMemory.peak());
    }

    /**
     * The JVM's own committed native memory (heap, code cache, compiler arenas, metaspace, thread
     * stacks), from Native Memory Tracking ({@code -XX:NativeMemoryTracking=summary}); libtorch's
     * allocations are not part of it.
     *
     * @return bytes, or -1 without tracking
     */
    static long jvmCommitted() {
        try {
            javax.management.MBeanServer server = java.lang.management.ManagementFactory.getPlatformMBeanServer();
            javax.management.ObjectName name = new javax.management.ObjectName("com.sun.management:type=DiagnosticCommand");
            String out = (String) server.invoke(name, "vmNativeMemory", new Object[] {new String[] {"summary"}},
                    new String[] {String[].class.getName()});
            java.util.regex.Matcher m = java.util.regex.Pattern.compile("Total: reserved=(\\d+)KB, committed=(\\d+)KB")
                    .matcher(out);
            return m.find() ? Long.parseLong(m.group(2)) * 1024 : -1;
        } catch (javax.management.JMException e) {
            return -1;
        }
    }

    private static long counted(String name, long bytes) {
        if (bytes < 0) {
            throw new IllegalStateException(name + " missing from /proc/self/status");
        }
        return bytes;
    }
}
