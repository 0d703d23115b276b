package io.mcore4j.training.gpt;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static io.mcore4j.training.gpt.GptBatchesDocumentMaskingTest.columns;

import ai.djl.ndarray.NDManager;
import io.mcore4j.contextparallel.ContextParallelSplit;
import io.mcore4j.core.Mcore4j;
import io.mcore4j.data.gpt.PackedSampleDataset;
import io.mcore4j.data.sampler.DataloaderType;
import io.mcore4j.training.MicroBatch;
import org.junit.jupiter.api.Test;

/**
 * {@link GptBatches} over rows of packed sequences ({@link PackedSampleDataset}): the labels are the rows' own (not
 * the inputs shifted across the row), the loss mask the rows' (times {@code --eod-mask-loss}'s), the positions
 * restart at every sequence, the sequences are the rows' lengths, and under context parallelism each rank holds its
 * chunks of every sequence; flags that derive sequences from end-of-document tokens are refused.
 */
class GptBatchesPackedTest {
    private static final int SEQ = 8;
    private static final int[][] INPUTS = {{10, 11, 12, 13, 14, 15, 16, 0}, {30, 31, 32, 33, 34, 35, 36, 37}};
    private static final int[][] LABELS = {{11, 12, 0, 14, 15, 16, 0, 0}, {31, 32, 33, 34, 35, 36, 37, 38}};
    private static final int[][] MASK = {{1, 1, 0, 0, 1, 1, 0, 0}, {0, 0, 1, 1, 1, 1, 1, 1}};
    // every length a multiple of 2·CP = 4: split per sequence (the third conversation of row 0 padded to 4)
    private static final int[][] LENGTHS = {{4, 4}, {8}};

    private static final PackedSampleDataset ROWS = new PackedSampleDataset() {
        @Override
        public long size() {
            return 2;
        }

        @Override
        public int sequenceLength() {
            return SEQ;
        }

        @Override
        public void sample(long index, int[] destination) {
            System.arraycopy(INPUTS[(int) index], 0, destination, 0, SEQ);
            destination[SEQ] = 0;
        }

        @Override
        public void labels(long index, int[] destination) {
            System.arraycopy(LABELS[(int) index], 0, destination, 0, SEQ);
        }

        @Override
        public void lossMask(long index, int[] destination) {
            System.arraycopy(MASK[(int) index], 0, destination, 0, SEQ);
        }

        @Override
        public int[] sequenceLengths(long index) {
            return LENGTHS[(int) index].clone();
        }
    };

    private static MicroBatch batch(NDManager m, DocumentMasking masking, ContextParallelSplit split) {
        return new GptBatches(ROWS, 2, 0, 1, split, DataloaderType.SINGLE, masking).microBatch(m, 0, 0);
    }

    @Test
    void theRowsGiveTheirOwnLabelsMaskAndSequences() {
        try (NDManager m = Mcore4j.newRootManager()) {
            MicroBatch b = batch(m, DocumentMasking.NONE, new ContextParallelSplit(1, 0));
            for (int c = 0; c < 2; c++) {
                assertArrayEquals(longs(INPUTS[c]), columns(b.tokens())[c], "tokens of row " + c);
                assertArrayEquals(longs(LABELS[c]), columns(b.labels())[c], "labels of row " + c);
                assertArrayEquals(longs(MASK[c]), columns(b.lossMask())[c], "loss mask of row " + c);
            }
            assertArrayEquals(new long[] {0, 1, 2, 3, 0, 1, 2, 3}, columns(b.positionIds())[0]);
            assertArrayEquals(new long[] {0, 1, 2, 3, 4, 5, 6, 7}, columns(b.positionIds())[1]);
            assertArrayEquals(new int[] {0, 4, 8}, b.packed().offsets(0));
            assertArrayEquals(new int[] {0, 8}, b.packed().offsets(1));

            MicroBatch eod = batch(m, new DocumentMasking(14, false, false, true), new ContextParallelSplit(1, 0));
            assertArrayEquals(new long[] {1, 1, 0, 0, 0, 1, 0, 0}, columns(eod.lossMask())[0], "input 14 is out of the loss");
        }
    }

    @Test
    void contextParallelRanksHoldTheirChunksOfEverySequence() {
        try (NDManager m = Mcore4j.newRootManager()) {
            MicroBatch whole = batch(m, DocumentMasking.NONE, new ContextParallelSplit(1, 0));
            for (int rank = 0; rank < 2; rank++) {
                ContextParallelSplit split = new ContextParallelSplit(2, rank);
                MicroBatch part = batch(m, DocumentMasking.NONE, split);
                assertArrayEquals(rank == 0 ? new long[] {0, 3, 4, 7} : new long[] {1, 2, 5, 6},
                        split.tokenIndicesOf(rank, whole.packed(), 0, SEQ), "chunks 0 and 3 of each sequence on rank 0");
                for (int c = 0; c < 2; c++) {
                    long[] mine = split.tokenIndicesOf(rank, whole.packed(), c, SEQ);
                    for (int t = 0; t < mine.length; t++) {
                        assertEquals(columns(whole.labels())[c][(int) mine[t]], columns(part.labels())[c][t]);
                        assertEquals(columns(whole.positionIds())[c][(int) mine[t]], columns(part.positionIds())[c][t]);
                    }
                }
            }
        }
    }

    @Test
    void endOfDocumentSequencesAreRefused() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> new GptBatches(ROWS, 2, 0, 1, new ContextParallelSplit(1, 0), DataloaderType.SINGLE,
                        new DocumentMasking(14, false, true, false)));
        assertEquals("packed samples restart the positions and the attention at every sequence already: drop"
                + " --reset-position-ids and --reset-attention-mask", e.getMessage());
    }

    private static long[] longs(int[] values) {
        long[] out = new long[values.length];
        for (int i = 0; i < out.length; i++) {
            out[i] = values[i];
        }
        return out;
    }
}
