package io.mcore4j.training.gpt;

import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.random.SeedScheme;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.models.transformer.AttentionBackend;
import io.mcore4j.models.transformer.ModelContext;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.training.BatchSource;
import io.mcore4j.training.MicroBatch;

/** The small GPT the training tests train: the model of a configuration, and deterministic token windows. */
final class TinyGptTraining {
    private TinyGptTraining() {}

    /**
     * @param config the model's configuration
     * @param groups this rank's groups
     * @param parameters owner of the parameters
     * @return this rank's model (one chunk per pipeline rank), from seed 3; close it
     */
    static GptTrainingModel model(TransformerConfig config, ProcessGroups groups, NDManager parameters) {
        return GptTrainingModel.build(ModelContext.create(config, groups, parameters, new SeedScheme(3)),
                AttentionBackend.AUTO.layerSpec(config), 1);
    }

    /**
     * @param seqLength tokens per sequence
     * @param microBatchSize sequences per micro-batch
     * @param vocab ids the tokens take
     * @return micro-batches of {@code [seqLength, microBatchSize]} tokens, each a function of the samples consumed
     *     and its index, labelled with the next id
     */
    static BatchSource batches(int seqLength, int microBatchSize, int vocab) {
        return (m, consumed, mb) -> {
            long[] tokens = new long[seqLength * microBatchSize];
            long[] labels = new long[tokens.length];
            for (int i = 0; i < tokens.length; i++) {
                tokens[i] = (5 * consumed + 3L * mb + (long) i * i) % vocab;
                labels[i] = (tokens[i] + 1) % vocab;
            }
            Shape shape = new Shape(seqLength, microBatchSize);
            return new MicroBatch(m.create(tokens, shape), m.create(labels, shape));
        };
    }
}
