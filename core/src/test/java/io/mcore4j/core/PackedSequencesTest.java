package io.mcore4j.core;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.Shape;

import org.junit.jupiter.api.Test;

/** Validation, the THD offsets and the per-sequence positions of {@link PackedSequences}. */
class PackedSequencesTest {

    @Test
    void lengthsGiveOffsetsPositionsAndTheThdStream() {
        PackedSequences p = PackedSequences.ofLengths(new int[] {3, 1, 4}, new int[] {8});
        assertEquals(2, p.columns());
        assertEquals(8, p.sequenceLength());
        assertArrayEquals(new int[] {0, 3, 4, 8}, p.offsets(0));
        assertArrayEquals(new int[] {3, 1, 4}, p.lengths(0));

        assertArrayEquals(new int[] {0, 3, 4, 8, 16}, p.cumulativeLengths());
        assertArrayEquals(new long[] {0, 1, 2, 0, 0, 1, 2, 3}, p.positionIds(0));
        assertArrayEquals(new int[] {0, 0, 0, 1, 2, 2, 2, 2}, p.sequenceIds(0));
        assertTrue(p.lengthsDivisibleBy(1));
        assertFalse(p.lengthsDivisibleBy(2));
        assertTrue(PackedSequences.ofLengths(new int[] {4, 8}, new int[] {12}).lengthsDivisibleBy(4));
        try (NDManager m = Mcore4j.newRootManager()) {
            NDArray ids = p.positionIds(m);
            assertEquals(new Shape(8, 2), ids.getShape());
            assertArrayEquals(new long[] {0, 0, 1, 1, 2, 2, 0, 3, 0, 4, 1, 5, 2, 6, 3, 7}, ids.toLongArray());
        }
    }

    @Test
    void documentsEndAtTheirEndOfDocumentToken() {
        int eod = 9;
        PackedSequences p = PackedSequences.ofDocuments(eod, new int[] {1, 9, 2, 9, 9, 3, 4, 9}, new int[] {9, 1, 2, 3, 4, 5, 6, 7});
        // the EOD belongs to the document it ends; one in the last position starts nothing
        assertArrayEquals(new int[] {0, 2, 4, 5, 8}, p.offsets(0));
        assertArrayEquals(new int[] {0, 1, 8}, p.offsets(1));
        assertEquals(PackedSequences.ofLengths(new int[] {2, 2, 1, 3}, new int[] {1, 7}), p);
    }

    @Test
    void errorsNameTheColumnAndTheOffset() {
        assertEquals("column 1: offset 2 is 3, not after offset 1 (3): every sequence holds at least one token",
                assertThrows(IllegalArgumentException.class,
                        () -> new PackedSequences(new int[][] {{0, 8}, {0, 3, 3, 8}})).getMessage());
        assertEquals("column 1 ends at offset 6, column 0 at 8: every column of a micro-batch holds the same number of tokens",
                assertThrows(IllegalArgumentException.class, () -> PackedSequences.ofLengths(new int[] {8}, new int[] {2, 4}))
                        .getMessage());
        assertEquals("column 0: offset 0 is 1, not 0",
                assertThrows(IllegalArgumentException.class, () -> new PackedSequences(new int[][] {{1, 8}})).getMessage());
        assertEquals("column 0: sequence 1 has length 0 (at least 1)",
                assertThrows(IllegalArgumentException.class, () -> PackedSequences.ofLengths(new int[] {8, 0})).getMessage());
    }

    @Test
    void theRecordKeepsItsOwnCopies() {
        int[][] offsets = {{0, 2, 4}};
        PackedSequences p = new PackedSequences(offsets);
        offsets[0][1] = 3;
        p.offsets()[0][1] = 3;
        assertArrayEquals(new int[] {0, 2, 4}, p.offsets(0));
    }
}
