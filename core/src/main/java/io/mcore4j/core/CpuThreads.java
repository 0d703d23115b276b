package io.mcore4j.core;

import ai.djl.engine.Engine;
import ai.djl.pytorch.jni.JniUtils;

import java.util.Locale;
import java.util.Map;

/**
 * How many threads libtorch runs each CPU operation on (its intra-op threads, {@code torch.set_num_threads})
 * in this process, chosen so that in-JVM ranks do not oversubscribe the cores: every rank thread that
 * calls an operation runs its own team of that many threads, so {@code ranks x threads} run at once. With
 * libtorch's default (one thread per core) four ranks on two cores run eight threads and each iteration
 * took 2 to 20 times as long as with one thread per rank, with the same results.
 *
 * <p>The choice, in order: an explicit request (a command's {@code --cpu-threads}); else what the user
 * set for libtorch ({@code -Dai.djl.pytorch.num_threads}, which DJL applies, or {@code OMP_NUM_THREADS},
 * which libtorch reads); else {@code max(1, cores / ranks)}.
 *
 * @param threads the intra-op threads chosen
 * @param source why: {@code "--cpu-threads"}, the user setting's name, or the rule
 */
public record CpuThreads(int threads, String source) {
    /** DJL's system property for libtorch's intra-op threads. */
    public static final String DJL_PROPERTY = "ai.djl.pytorch.num_threads";
    /** The environment variable libtorch (OpenMP) reads for its intra-op threads. */
    public static final String OMP_VARIABLE = "OMP_NUM_THREADS";

    /** Refuses a count below 1. */
    public CpuThreads {
        if (threads < 1) {
            throw new IllegalArgumentException("--cpu-threads " + threads + " must be at least 1");
        }
    }

    /**
     * The choice for this process: its available processors, DJL's property and its environment.
     *
     * @param requested an explicit count, or null
     * @param ranks ranks running as threads of this process
     * @return the choice
     * @throws IllegalArgumentException if {@code requested} is below 1
     */
    public static CpuThreads choose(Integer requested, int ranks) {
        return choose(requested, ranks, Runtime.getRuntime().availableProcessors(), System.getProperty(DJL_PROPERTY),
                System.getenv());
    }

    /**
     * @param requested an explicit count, or null
     * @param ranks ranks running as threads of this process
     * @param cores the cores this process may use
     * @param property the value of {@link #DJL_PROPERTY}, or null
     * @param environment the process environment (for {@link #OMP_VARIABLE})
     * @return the choice
     * @throws IllegalArgumentException if {@code requested} is below 1
     */
    static CpuThreads choose(Integer requested, int ranks, int cores, String property, Map<String, String> environment) {
        if (requested != null) {
            return new CpuThreads(requested, "--cpu-threads");
        }
        Integer fromProperty = positive(property);
        if (fromProperty != null) {
            return new CpuThreads(fromProperty, "-D" + DJL_PROPERTY);
        }
        Integer omp = positive(environment.get(OMP_VARIABLE));
        if (omp != null) {
            return new CpuThreads(omp, OMP_VARIABLE);
        }
        return new CpuThreads(Math.max(1, cores / Math.max(1, ranks)),
                cores + " cores / " + ranks + (ranks == 1 ? " rank" : " ranks") + " in this process");
    }

    /** Sets libtorch's intra-op threads of this process to {@link #threads()}. */
    public void apply() {
        Mcore4j.ensureInitialized();
        Engine.getEngine("PyTorch"); // loads libtorch's JNI library, if no tensor has been made yet
        JniUtils.setNumThreads(threads);
    }

    /** @return libtorch's intra-op threads of this process now */
    public static int current() {
        Mcore4j.ensureInitialized();
        Engine.getEngine("PyTorch");
        return JniUtils.getNumThreads();
    }

    /** @return one line for a run's start, e.g. {@code "CPU: 1 intra-op thread per operation (2 cores / 4 ranks ...)"} */
    public String describe() {
        return String.format(Locale.ROOT, "CPU: %d intra-op thread%s per operation (%s; --cpu-threads sets it)", threads,
                threads == 1 ? "" : "s", source);
    }

    private static Integer positive(String text) {
        if (text == null) {
            return null;
        }
        try {
            int v = Integer.parseInt(text.trim());
            return v > 0 ? v : null;
        } catch (NumberFormatException e) {
            return null;
        }
    }
}
