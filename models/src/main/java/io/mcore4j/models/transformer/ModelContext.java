package io.mcore4j.models.transformer;

import ai.djl.ndarray.NDManager;
import io.mcore4j.core.random.DeterministicRandom;
import io.mcore4j.core.random.SeedScheme;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.moe.AuxLossScale;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.tensorparallel.Initializer;
import io.mcore4j.tensorparallel.Initializers;

import java.util.Arrays;

/**
 * What every module of one model chunk is built with: the config, this rank's groups, the manager
 * owning the parameters, and the seeds.
 *
 * <p>Initialisation seeds depend only on the parameter's layout-independent key, so every layout
 * builds the same global weights. Dropout generators follow Megatron's regions: dropout on
 * activations replicated across tensor-parallel ranks agrees across them; dropout inside the
 * tensor-parallel region (attention heads, or everything with sequence parallelism) varies with
 * the TP rank; both vary with the pipeline stage and the context-parallel rank (whose ranks hold
 * different tokens) and agree across data-parallel ranks.
 *
 * @param config the model config
 * @param groups this rank's groups
 * @param parameters owner of the parameters
 * @param seeds the seed scheme
 * @param hiddenDropout generator of hidden-state dropout masks
 * @param attentionDropout generator of attention-probability dropout masks
 * @param auxLossScale upstream gradient of MoE auxiliary losses, set by the training loop each step
 *     to (loss scale x context-parallel size / micro-batches, as Megatron); one per rank
 * @param cpuInitialization build each weight whole on the Java side and keep this rank's part, so
 *     every layout gets bitwise the same global weights (Megatron's {@code --use-cpu-initialization});
 *     false draws each rank's part directly on its device (fast for large models, layout-dependent)
 */
public record ModelContext(TransformerConfig config, ProcessGroups groups, NDManager parameters, SeedScheme seeds,
                           DeterministicRandom hiddenDropout, DeterministicRandom attentionDropout,
                           AuxLossScale auxLossScale, boolean cpuInitialization) {

    /**
     * A context with dropout generators derived from {@code seeds}.
     *
     * @param config the config
     * @param groups this rank's groups
     * @param parameters owner of the parameters
     * @param seeds the seed scheme
     * @return the context
     */
    public static ModelContext create(TransformerConfig config, ProcessGroups groups, NDManager parameters, SeedScheme seeds) {
        int pp = groups.pipelineRank();
        int tp = groups.tensorParallelRank();
        // context-parallel ranks hold different tokens, so their masks differ too (the coordinate is
        // added only above CP1, which keeps the masks of layouts without context parallelism)
        DeterministicRandom hidden = config.sequenceParallel()
                ? generator(seeds, "dropout-tensor-parallel-region", groups, pp, tp)
                : generator(seeds, "dropout-replicated", groups, pp);
        DeterministicRandom attention = generator(seeds, "dropout-tensor-parallel-region-attention", groups, pp, tp);
        return new ModelContext(config, groups, parameters, seeds, hidden, attention, new AuxLossScale(), true);
    }

    private static DeterministicRandom generator(SeedScheme seeds, String region, ProcessGroups groups, long... coordinates) {
        if (groups.cp().size() == 1) {
            return seeds.generator(region, coordinates);
        }
        long[] withCp = Arrays.copyOf(coordinates, coordinates.length + 1);
        withCp[coordinates.length] = groups.cp().rank();
        return seeds.generator(region + "/context-parallel", withCp);
    }

    /**
     * The same context with device-side per-rank initialisation.
     *
     * @return a new context
     */
    public ModelContext withDeviceInitialization() {
        return new ModelContext(config, groups, parameters, seeds, hiddenDropout, attentionDropout, auxLossScale, false);
    }

    /**
     * The initializer of a weight: normal with {@code std}, seeded by the weight's key.
     *
     * @param key the weight's layout-independent checkpoint key
     * @param std standard deviation
     * @return the initializer
     */
    public Initializer initializer(String key, double std) {
        return cpuInitialization ? Initializers.normal(std, initSeed(key)) : Initializers.normalPerRank(std, initSeed(key));
    }

    /**
     * The initialisation seed of a parameter.
     *
     * @param key its layout-independent checkpoint key
     * @return the seed
     */
    public long initSeed(String key) {
        return seeds.seed("init/" + key);
    }

    /** @return the standard deviation for output projections: std / sqrt(2 * layers) */
    public double outputInitStd() {
        return config.outputInitStd();
    }
}
