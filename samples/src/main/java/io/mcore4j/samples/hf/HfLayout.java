package io.mcore4j.samples.hf;

import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import io.mcore4j.core.Mcore4j;
import io.mcore4j.core.random.SeedScheme;
import io.mcore4j.hf.HfConfig;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.models.gpt.GptModel;
import io.mcore4j.models.transformer.LayerSpec;
import io.mcore4j.models.transformer.ModelContext;
import io.mcore4j.parallel.Backend;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;
import io.mcore4j.samples.launch.LaunchedRank;
import io.mcore4j.samples.launch.ParallelLayoutOptions;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

/**
 * The layout flags both commands share (Megatron-LM's names) and how they run on every rank: N
 * threads of this JVM with {@code --nproc N}, or one process per rank under torchrun, srun or
 * mpirun (on its GPU when one is visible).
 */
final class HfLayout {
    @Mixin
    final ParallelLayoutOptions layout = new ParallelLayoutOptions();

    @Option(names = "--make-vocab-size-divisible-by", description = "vocabulary padding divisor, times TP (default: ${DEFAULT-VALUE})")
    int vocabDivisor = 128;

    @Option(names = "--fp16", description = "float16 parameters (default float32; bfloat16 weights are converted)")
    boolean fp16;

    @Option(names = "--timeout-seconds", description = "collective timeout (default: ${DEFAULT-VALUE})")
    int timeoutSeconds = 600;

    /** What one rank does with its groups, its manager and its model chunks. */
    @FunctionalInterface
    interface RankTask<T> {
        T run(ProcessGroups groups, NDManager manager, List<GptModel> chunks) throws Exception;
    }

    /**
     * The model's config at this layout: the checkpoint's shapes, the vocabulary padded (to
     * {@code paddedVocab} when positive, else to a multiple of divisor x TP), the dtype chosen.
     */
    TransformerConfig modelConfig(HfConfig hf, int paddedVocab) {
        DataType dtype = fp16 ? DataType.FLOAT16 : DataType.FLOAT32;
        return paddedVocab > 0 ? hf.transformerConfigPaddedTo(paddedVocab, dtype)
                : hf.transformerConfig(vocabDivisor, layout.tensorParallel(), dtype);
    }

    /**
     * Checks the layout flags before anything is read: each size at least 1, and the ranks they need
     * dividing the world ({@code --nproc}, or the launcher's).
     *
     * @throws IllegalArgumentException naming the flags
     */
    void checkRanks() {
        if (layout.nproc() < 1 || layout.tensorParallel() < 1 || layout.pipelineParallel() < 1 || layout.expertParallel() < 1
                || timeoutSeconds < 1) {
            throw new IllegalArgumentException("--nproc " + layout.nproc() + ", --tensor-model-parallel-size "
                    + layout.tensorParallel() + ", --pipeline-model-parallel-size " + layout.pipelineParallel()
                    + ", --expert-model-parallel-size " + layout.expertParallel() + " and --timeout-seconds " + timeoutSeconds
                    + " must each be at least 1");
        }
        layout.checkWorld(layout.worldSize(), 1);
    }

    /** Builds this rank's chunks of {@code config} on every rank and runs {@code task}; returns rank 0's result. */
    <T> T run(TransformerConfig config, RankTask<T> task) throws Exception {
        checkRanks();
        Mcore4j.ensureInitialized();
        Duration timeout = Duration.ofSeconds(timeoutSeconds);
        boolean launched = ParallelLayoutOptions.launched();
        int world = layout.worldSize();
        ParallelDims dims = ParallelDims.builder(world).tensorParallel(layout.tensorParallel())
                .pipelineParallel(layout.pipelineParallel()).virtualPipelineParallel(layout.virtualStages(config.numLayers()))
                .expertParallel(layout.expertParallel()).build();
        config.validate(dims, layout.layersPerVirtualStage());
        if (launched) {
            LaunchedRank rank = LaunchedRank.connect(timeout);
            try (Backend backend = rank.backend(); NDManager root = NDManager.newBaseManager(rank.device())) {
                ProcessGroups groups = ProcessGroups.create(dims, backend);
                return task.run(groups, root, build(config, groups, root));
            }
        }
        List<T> results = InJvmWorld.run(world, timeout, rank -> {
            ProcessGroups groups = rank.groups(dims);
            return task.run(groups, rank.manager(), build(config, groups, rank.manager()));
        });
        return results.get(0);
    }

    /** This rank's model chunks: one per virtual stage, layers split evenly as Megatron splits them. */
    static List<GptModel> build(TransformerConfig c, ProcessGroups groups, NDManager manager) {
        ParallelDims d = groups.dims();
        int pp = d.pipelineParallel();
        int vp = d.virtualPipelineParallel();
        int perChunk = c.numLayers() / (pp * vp);
        ModelContext ctx = ModelContext.create(c, groups, manager, new SeedScheme(1234)).withDeviceInitialization();
        List<GptModel> chunks = new ArrayList<>();
        for (int v = 0; v < vp; v++) {
            int first = (v * pp + groups.pipelineRank()) * perChunk;
            int[] layers = new int[perChunk];
            for (int i = 0; i < perChunk; i++) {
                layers[i] = first + i;
            }
            boolean pre = v == 0 && groups.isFirstStage();
            boolean post = v == vp - 1 && groups.isLastStage();
            chunks.add(GptModel.build(ctx, LayerSpec.tensorParallel(), layers, pre, post));
        }
        return chunks;
    }
}
