package io.mcore4j.samples.reliability;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.data.gpt.GptDatasetBuilder;
import io.mcore4j.data.indexed.CorruptDatasetException;
import io.mcore4j.data.indexed.DType;
import io.mcore4j.data.indexed.IndexedDatasetWriter;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.inprocess.InJvmWorld;
import io.mcore4j.tensorparallel.VocabParallelEmbedding;

import java.io.IOException;
import java.nio.file.Path;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Reliability (issue 22, item 5): at tensor-parallel size 2 the vocabulary-parallel embedding maps a
 * token id outside the vocabulary to a zero row without any error (so such data trained silently);
 * checking the data against the vocabulary size, as pretrain-gpt's {@code --vocab-size} does, now
 * fails on every rank before training, naming the file, document, position and id.
 */
class VocabularyCheckReliabilityTest {
    private static final int VOCAB = 256;
    private static final int OUT_OF_RANGE = 300;

    @TempDir
    Path dir;

    @Test
    void outOfVocabularyDataFailsAtTensorParallelSizeTwo() throws IOException {
        Path prefix = dir.resolve("corpus");
        try (IndexedDatasetWriter w = IndexedDatasetWriter.create(prefix, DType.UINT16)) {
            for (int d = 0; d < 4; d++) {
                int[] tokens = new int[64];
                for (int i = 0; i < tokens.length; i++) {
                    tokens[i] = (d * 7 + i) % VOCAB;
                }
                if (d == 2) {
                    tokens[10] = OUT_OF_RANGE;
                }
                w.addDocument(tokens);
            }
            w.finish();
        }
        InJvmWorld.run(2, rank -> {
            Communicator tp = rank.groups(ParallelDims.of(2, 2, 1)).tp();
            // the hazard: at TP2 an out-of-range id silently looks up zeros
            try (VocabParallelEmbedding embedding = VocabParallelEmbedding.builder(VOCAB, 4, tp).manager(rank.manager()).build();
                 AutogradScope scope = AutogradScope.openNoGrad(rank.manager())) {
                NDArray ids = rank.manager().create(new int[] {OUT_OF_RANGE}, new Shape(1, 1)).toType(DataType.INT64, false);
                NDArray row = embedding.forward(scope, ids);
                assertArrayEquals(new float[4], row.toFloatArray(), "an out-of-range id embeds as zeros at TP2");
            }
            // the check: every rank's dataset build fails before training
            GptDatasetBuilder builder = GptDatasetBuilder.create().dataPath(prefix.toString()).sequenceLength(16)
                    .samples(8, 0, 0).cache(false).vocabSize(VOCAB);
            CorruptDatasetException e = assertThrows(CorruptDatasetException.class, builder::build);
            assertTrue(e.getMessage().contains("token id 300 at position 10 of document 2")
                    && e.getMessage().contains("[0, 256)") && e.getMessage().contains("corpus.bin"), e.getMessage());
            return null;
        });
    }
}
