package io.mcore4j.server;

import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import io.mcore4j.core.Mcore4j;
import io.mcore4j.core.random.SeedScheme;
import io.mcore4j.hf.HfCheckpoint;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.models.gpt.GptModel;
import io.mcore4j.models.transformer.LayerSpec;
import io.mcore4j.models.transformer.ModelContext;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmFabric;

import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.stream.IntStream;

/**
 * The tiny Llama of data's chat fixtures (2 layers, hidden 16, a 320-token byte-level BPE with Llama 3's chat
 * template), loaded in fp32 on one in-JVM rank. {@link #close()} frees its parameters.
 */
final class TinyLlama implements AutoCloseable {
    static final Path DIR = Path.of("..", "data", "src", "test", "resources", "io", "mcore4j", "data", "chat", "llama");

    final GptModel model;
    final int vocabulary;
    private final NDManager root;

    TinyLlama() {
        Mcore4j.ensureInitialized();
        ProcessGroups groups = ProcessGroups.create(ParallelDims.of(1, 1, 1),
                new InJvmFabric(1, Duration.ofSeconds(60)).backend(0));
        root = Mcore4j.newRootManager();
        try (HfCheckpoint checkpoint = HfCheckpoint.open(DIR)) {
            TransformerConfig config = checkpoint.config().transformerConfig(128, 1, DataType.FLOAT32);
            model = GptModel.build(ModelContext.create(config, groups, root, new SeedScheme(1)), LayerSpec.tensorParallel(),
                    IntStream.range(0, config.numLayers()).toArray(), true, true);
            checkpoint.loadInto(List.of(model));
            vocabulary = checkpoint.config().vocabSize();
        }
    }

    @Override
    public void close() {
        root.close();
    }
}
