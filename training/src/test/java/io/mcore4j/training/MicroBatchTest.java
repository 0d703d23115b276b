package io.mcore4j.training;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.contextparallel.ContextParallelSplit;
import io.mcore4j.core.Mcore4j;
import io.mcore4j.core.PackedSequences;

import org.junit.jupiter.api.Test;

/** {@link MicroBatch#ofPacked}: the entry point for sequences of explicit lengths (packed fine-tuning data). */
class MicroBatchTest {

    @Test
    void packedSequencesOfExplicitLengthsGetResetPositionsAndThePerSequenceSplit() {
        // one column: sequences of 4 and 8 tokens (2·CP = 4 divides both); token value = its index
        PackedSequences packed = PackedSequences.ofLengths(new int[] {4, 8});
        try (NDManager m = Mcore4j.newRootManager()) {
            NDArray tokens = m.arange(0, 12, 1, DataType.INT64).reshape(12, 1);
            NDArray labels = m.arange(100, 112, 1, DataType.INT64).reshape(12, 1);
            NDArray mask = m.create(new float[] {0, 0, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1}, new Shape(12, 1));
            MicroBatch whole = MicroBatch.ofPacked(m, packed, tokens, labels, mask, new ContextParallelSplit(1, 0));
            assertArrayEquals(new long[] {0, 1, 2, 3, 0, 1, 2, 3, 4, 5, 6, 7}, whole.positionIds().toLongArray());
            assertEquals(packed, whole.packed());
            // CP2 rank 1 holds chunks 1 and 2 of each sequence: tokens 1, 2 of the first, 6, 7, 8, 9 of the second
            MicroBatch part = MicroBatch.ofPacked(m, packed, tokens, labels, mask, new ContextParallelSplit(2, 1));
            assertArrayEquals(new long[] {1, 2, 6, 7, 8, 9}, part.tokens().toLongArray());
            assertArrayEquals(new long[] {101, 102, 106, 107, 108, 109}, part.labels().toLongArray());
            assertArrayEquals(new long[] {1, 2, 2, 3, 4, 5}, part.positionIds().toLongArray());
            assertArrayEquals(new float[] {0, 1, 1, 1, 1, 1}, part.lossMask().toFloatArray());
            assertEquals(packed, part.packed(), "every rank keeps the whole micro-batch's sequences");
        }
    }
}
