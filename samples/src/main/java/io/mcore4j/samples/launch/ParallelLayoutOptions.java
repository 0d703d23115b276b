package io.mcore4j.samples.launch;

import io.mcore4j.parallel.launch.LaunchEnvironment;
import picocli.CommandLine.Option;

/**
 * The parallel-layout flags that {@code pretrain-gpt}, {@code gpt-benchmark}, {@code convert-hf} and
 * {@code export-hf} share, with Megatron-LM's names, as one picocli mixin, and the world they run
 * in: the ranks of a launcher (torchrun, srun, mpirun, {@link LocalLauncher}) when its variables are
 * set, else {@code --nproc} threads of this JVM. The commands check the values against their model.
 */
public final class ParallelLayoutOptions {
    @Option(names = "--nproc", description = "Ranks as threads of this JVM, on the CPU (ignored under a launcher). Default: ${DEFAULT-VALUE}.")
    int nproc = 1;
    @Option(names = "--tensor-model-parallel-size", description = "Default: ${DEFAULT-VALUE}.")
    int tensorParallel = 1;
    @Option(names = "--pipeline-model-parallel-size", description = "Default: ${DEFAULT-VALUE}.")
    int pipelineParallel = 1;
    @Option(names = "--num-layers-per-virtual-pipeline-stage", description = "Interleaved pipelining: layers per model chunk (0: not interleaved). Default: ${DEFAULT-VALUE}.")
    int layersPerVirtualStage = 0;
    @Option(names = "--expert-model-parallel-size", description = "Default: ${DEFAULT-VALUE}.")
    int expertParallel = 1;

    /** @return {@code --nproc}: in-JVM ranks when no launcher started this process */
    public int nproc() {
        return nproc;
    }

    /** @return {@code --tensor-model-parallel-size} */
    public int tensorParallel() {
        return tensorParallel;
    }

    /** @return {@code --pipeline-model-parallel-size} */
    public int pipelineParallel() {
        return pipelineParallel;
    }

    /** @return {@code --num-layers-per-virtual-pipeline-stage}, 0 when not interleaved */
    public int layersPerVirtualStage() {
        return layersPerVirtualStage;
    }

    /** @return {@code --expert-model-parallel-size} */
    public int expertParallel() {
        return expertParallel;
    }

    /**
     * @param numLayers the model's layers
     * @return model chunks per pipeline rank: {@code numLayers / (PP x layers per virtual stage)}, or 1 when not interleaved
     */
    public int virtualStages(int numLayers) {
        return layersPerVirtualStage > 0 ? numLayers / (pipelineParallel * layersPerVirtualStage) : 1;
    }

    /**
     * Replaces the layout (pretrain-gpt's {@code --auto-layout} writes the planner's choice here).
     *
     * @param tp tensor-parallel size
     * @param pp pipeline-parallel size
     * @param layersPerStage layers per virtual pipeline stage (0: not interleaved)
     * @param ep expert-parallel size
     */
    public void set(int tp, int pp, int layersPerStage, int ep) {
        tensorParallel = tp;
        pipelineParallel = pp;
        layersPerVirtualStage = layersPerStage;
        expertParallel = ep;
    }

    /** @return whether a launcher's variables ({@code RANK}, {@code SLURM_PROCID}, {@code OMPI_COMM_WORLD_RANK}) are set */
    public static boolean launched() {
        return System.getenv("RANK") != null || System.getenv("SLURM_PROCID") != null
                || System.getenv("OMPI_COMM_WORLD_RANK") != null;
    }

    /**
     * Checks that the ranks the layout needs divide the world, naming the flags: every model copy
     * takes {@code TP x CP x PP} ranks, and every expert group {@code TP x EP x PP}.
     *
     * @param world the ranks, {@link #worldSize()}
     * @param contextParallel the context-parallel size (1 for a command without the flag)
     * @throws IllegalArgumentException naming the sizes, the world, and the {@code --nproc} (or the
     *         launcher's rank count) that would fit
     */
    public void checkWorld(int world, int contextParallel) {
        long perReplica = (long) tensorParallel * pipelineParallel * contextParallel;
        long perExperts = (long) tensorParallel * pipelineParallel * expertParallel;
        if (world % perReplica == 0 && world % perExperts == 0) {
            return;
        }
        long needed = (long) tensorParallel * pipelineParallel * lcm(contextParallel, expertParallel);
        throw new IllegalArgumentException("--tensor-model-parallel-size " + tensorParallel + " x --pipeline-model-parallel-size "
                + pipelineParallel + (contextParallel > 1 ? " x --context-parallel-size " + contextParallel : "")
                + (expertParallel > 1 ? " with --expert-model-parallel-size " + expertParallel : "")
                + " need a multiple of " + needed + " ranks, but " + (launched()
                ? "the launcher started " + world + "; expected " + needed + " ranks or a multiple"
                : "--nproc is " + world + "; expected --nproc " + needed + " or a multiple (ranks as threads of this JVM)"));
    }

    private static long lcm(long a, long b) {
        long x = a;
        long y = b;
        while (y != 0) {
            long t = x % y;
            x = y;
            y = t;
        }
        return a / x * b;
    }

    /** @return the launcher's world size under a launcher, else {@code --nproc} */
    public int worldSize() {
        return launched() ? LaunchEnvironment.fromSystem().worldSize() : nproc;
    }
}
