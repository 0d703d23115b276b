package io.mcore4j.planner;

import io.mcore4j.models.TransformerConfig.Recompute;
import io.mcore4j.parallel.ParallelDims;

import java.util.Locale;

/**
 * One candidate way to run a job: the parallel sizes, the micro-batch and the recompute policy.
 * Only positivity is checked here; whether a model and a world accept it is the training setup's
 * decision ({@link LayoutSearch} asks it).
 *
 * @param tensorParallel TP size
 * @param pipelineParallel PP size
 * @param virtualStages model chunks per pipeline rank (1 = not interleaved)
 * @param dataParallel DP size of dense layers
 * @param contextParallel CP size
 * @param expertParallel EP size (1 for dense models)
 * @param microBatchSize samples per micro-batch
 * @param recompute activation recompute granularity
 * @param distributedOptimizer whether optimizer state is sharded over data-parallel ranks
 */
public record Layout(int tensorParallel, int pipelineParallel, int virtualStages, int dataParallel, int contextParallel,
                     int expertParallel, int microBatchSize, Recompute recompute, boolean distributedOptimizer) {

    /**
     * Checks the sizes are positive.
     *
     * @throws IllegalArgumentException naming the size that is not
     */
    public Layout {
        positive("tensor parallel size", tensorParallel);
        positive("pipeline parallel size", pipelineParallel);
        positive("virtual pipeline stages", virtualStages);
        positive("data parallel size", dataParallel);
        positive("context parallel size", contextParallel);
        positive("expert parallel size", expertParallel);
        positive("micro-batch size", microBatchSize);
        if (recompute == null) {
            throw new IllegalArgumentException("recompute must be given (NONE, SELECTIVE or FULL)");
        }
    }

    /** @return ranks this layout uses: TP x PP x CP x DP */
    public int worldSize() {
        return tensorParallel * pipelineParallel * contextParallel * dataParallel;
    }

    /** @return the rank grid of this layout (Megatron-Core's default axis order) */
    public ParallelDims dims() {
        return ParallelDims.builder(worldSize()).tensorParallel(tensorParallel).pipelineParallel(pipelineParallel)
                .virtualPipelineParallel(virtualStages).contextParallel(contextParallel).expertParallel(expertParallel)
                .build();
    }

    /**
     * @param globalBatchSize samples per iteration
     * @return micro-batches each data-parallel replica runs per iteration
     */
    public long microBatches(long globalBatchSize) {
        return globalBatchSize / ((long) microBatchSize * dataParallel);
    }

    /**
     * The {@code pretrain-gpt} flags that select this layout (the data-parallel size follows from
     * the number of ranks).
     *
     * @param numLayers the model's layers (for {@code --num-layers-per-virtual-pipeline-stage})
     * @return flags separated by spaces
     */
    public String flags(int numLayers) {
        StringBuilder b = new StringBuilder();
        b.append("--tensor-model-parallel-size ").append(tensorParallel);
        b.append(" --pipeline-model-parallel-size ").append(pipelineParallel);
        if (virtualStages > 1) {
            b.append(" --num-layers-per-virtual-pipeline-stage ").append(numLayers / (pipelineParallel * virtualStages));
        }
        if (contextParallel > 1) {
            b.append(" --context-parallel-size ").append(contextParallel);
        }
        if (expertParallel > 1) {
            b.append(" --expert-model-parallel-size ").append(expertParallel);
        }
        b.append(" --micro-batch-size ").append(microBatchSize);
        b.append(" --recompute-granularity ").append(recompute.name().toLowerCase(Locale.ROOT));
        if (distributedOptimizer) {
            b.append(" --use-distributed-optimizer");
        }
        return b.toString();
    }

    /** @return a short name such as {@code TP2 PP2 VP2 DP2 mb1 selective} */
    public String name() {
        StringBuilder b = new StringBuilder("TP" + tensorParallel + " PP" + pipelineParallel);
        if (virtualStages > 1) {
            b.append(" VP").append(virtualStages);
        }
        if (contextParallel > 1) {
            b.append(" CP").append(contextParallel);
        }
        if (expertParallel > 1) {
            b.append(" EP").append(expertParallel);
        }
        b.append(" DP").append(dataParallel).append(" mb").append(microBatchSize).append(' ')
                .append(recompute.name().toLowerCase(Locale.ROOT));
        if (distributedOptimizer && dataParallel > 1) {
            b.append(" dist-opt");
        }
        return b.toString();
    }

    private static void positive(String what, int value) {
        if (value < 1) {
            throw new IllegalArgumentException(what + " must be at least 1, got " + value);
        }
    }
}
