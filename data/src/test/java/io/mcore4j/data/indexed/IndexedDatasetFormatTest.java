package io.mcore4j.data.indexed;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class IndexedDatasetFormatTest {
    @TempDir
    Path dir;

    @Test
    void threeDocumentsHaveMegatronsExactByteLayout() throws IOException {
        Path prefix = dir.resolve("three_text_document");
        try (IndexedDatasetWriter w = IndexedDatasetWriter.create(prefix, DType.UINT16)) {
            w.addDocument(new int[] {1, 2, 3});
            w.addDocument(new int[] {65535, 7});
            w.addDocument(new int[] {256, 0, 9, 10});
            w.finish();
        }
        byte[] expectedIdx = new LittleEndianBytes()
                .ascii("MMIDIDX\0\0")
                .i64(1) // version
                .u8(8) // uint16
                .i64(3) // sequences
                .i64(4) // document indices: 3 documents + the leading 0
                .i32(3).i32(2).i32(4) // sequence lengths
                .i64(0).i64(6).i64(10) // byte pointers: cumulative lengths x 2 bytes
                .i64(0).i64(1).i64(2).i64(3) // sequence index at which each document ends
                .toByteArray();
        byte[] expectedBin = new LittleEndianBytes()
                .u16(1).u16(2).u16(3)
                .u16(65535).u16(7)
                .u16(256).u16(0).u16(9).u16(10)
                .toByteArray();
        assertEquals(34 + 3 * 4 + 3 * 8 + 4 * 8, expectedIdx.length);
        assertArrayEquals(expectedIdx, Files.readAllBytes(dir.resolve("three_text_document.idx")));
        assertArrayEquals(expectedBin, Files.readAllBytes(dir.resolve("three_text_document.bin")));
    }

    @Test
    void documentsOfSeveralSequencesAndEmptyDocumentsAreIndexedLikeMegatron() throws IOException {
        Path prefix = dir.resolve("sentences");
        try (IndexedDatasetWriter w = IndexedDatasetWriter.create(prefix, DType.INT32)) {
            w.addSequence(new int[] {-5});
            w.endDocument();
            w.addSequence(new int[] {1, 2});
            w.addSequence(new int[] {3});
            w.endDocument();
            w.endDocument(); // an empty text
            w.finish();
        }
        byte[] expectedIdx = LittleEndianBytes.idx(4, new int[] {1, 2, 1}, new long[] {0, 4, 12}, new long[] {0, 1, 3, 3}, null);
        assertArrayEquals(expectedIdx, Files.readAllBytes(DatasetFiles.idx(prefix)));
        assertArrayEquals(new LittleEndianBytes().i32(-5).i32(1).i32(2).i32(3).toByteArray(), Files.readAllBytes(DatasetFiles.bin(prefix)));
        try (IndexedDatasetReader r = IndexedDatasetReader.open(prefix)) {
            assertEquals(3, r.documentCount());
            assertEquals(1, r.documentLength(0));
            assertEquals(3, r.documentLength(1));
            assertEquals(0, r.documentLength(2));
            int[] window = new int[2];
            r.readDocument(1, 1, 2, window, 0); // crosses from the first sequence of document 1 into its second
            assertArrayEquals(new int[] {2, 3}, window);
        }
    }

    @Test
    void everyDtypeRoundTrips() throws IOException {
        for (DType dtype : DType.values()) {
            Path prefix = dir.resolve("rt_" + dtype);
            long[][] docs;
            double[][] floats = null;
            if (dtype.isFloatingPoint()) {
                floats = new double[][] {{1.5, -2.25, 0.0}, {3.0e5}, {-0.125, 7.75}};
                docs = null;
            } else {
                docs = new long[][] {{dtype.minValue(), dtype.maxValue(), 0}, {1}, {dtype.maxValue() - 1, dtype.minValue() + 1}};
            }
            try (IndexedDatasetWriter w = IndexedDatasetWriter.create(prefix, dtype)) {
                for (int d = 0; d < 3; d++) {
                    if (floats != null) {
                        w.addSequence(floats[d]);
                    } else {
                        w.addSequence(docs[d]);
                    }
                    w.endDocument();
                }
                w.finish();
            }
            assertEquals(34 + 3 * 12 + 4 * 8, Files.size(DatasetFiles.idx(prefix)), dtype.toString());
            assertEquals(6L * dtype.size(), Files.size(DatasetFiles.bin(prefix)), dtype.toString());
            try (IndexedDatasetReader r = IndexedDatasetReader.open(prefix)) {
                assertEquals(dtype, r.dtype());
                assertEquals(3, r.sequenceCount());
                assertEquals(3, r.documentCount());
                for (int d = 0; d < 3; d++) {
                    TokenView view = r.sequence(d);
                    if (floats != null) {
                        assertArrayEquals(floats[d], view.toDoubleArray(), 0.0, dtype + " document " + d);
                    } else {
                        assertArrayEquals(docs[d], view.toLongArray(), dtype + " document " + d);
                    }
                }
                assertEquals(dtype.size() * 3L, r.sequencePointer(1));
                assertEquals(dtype.size() * 4L, r.sequencePointer(2));
            }
        }
    }

    @Test
    void intWindowsReadTheSameThroughEveryPath() throws IOException {
        Path prefix = dir.resolve("ints");
        int[] tokens = new int[1000];
        for (int k = 0; k < tokens.length; k++) {
            tokens[k] = (k * 7919) % 50000;
        }
        for (DType dtype : List.of(DType.UINT16, DType.INT32, DType.INT64)) {
            try (IndexedDatasetWriter w = IndexedDatasetWriter.create(prefix, dtype)) {
                w.addDocument(tokens);
                w.finish();
            }
            try (IndexedDatasetReader r = IndexedDatasetReader.open(prefix)) {
                assertArrayEquals(tokens, r.sequence(0).toIntArray());
                TokenView window = r.sequence(0, 100, 5);
                assertEquals(tokens[102], window.getInt(2));
                assertEquals(5 * dtype.size(), window.buffer().remaining());
            }
        }
    }

    @Test
    void sequenceModesRoundTripAndAreDetectedFromTheFileSize() throws IOException {
        Path prefix = dir.resolve("multimodal");
        try (IndexedDatasetWriter w = IndexedDatasetWriter.create(prefix, DType.UINT8, true)) {
            w.addSequence(new int[] {1, 2}, (byte) 0);
            w.addSequence(new int[] {3}, (byte) 1);
            w.endDocument();
            w.finish();
        }
        byte[] expected = LittleEndianBytes.idx(1, new int[] {2, 1}, new long[] {0, 2}, new long[] {0, 2}, new byte[] {0, 1});
        assertArrayEquals(expected, Files.readAllBytes(DatasetFiles.idx(prefix)));
        try (IndexedDatasetReader r = IndexedDatasetReader.open(prefix)) {
            assertTrue(r.header().hasSequenceModes());
            assertEquals(0, r.sequenceMode(0));
            assertEquals(1, r.sequenceMode(1));
        }
        Path plain = dir.resolve("plain");
        try (IndexedDatasetWriter w = IndexedDatasetWriter.create(plain, DType.UINT8)) {
            w.addDocument(new int[] {1});
            w.finish();
        }
        try (IndexedDatasetReader r = IndexedDatasetReader.open(plain)) {
            assertFalse(r.header().hasSequenceModes());
            assertThrows(IllegalStateException.class, () -> r.sequenceMode(0));
        }
        CorruptDatasetException e = assertThrows(CorruptDatasetException.class, () -> IndexedDatasetReader.open(plain,
                new IndexedDatasetReader.Options(1 << 20, 64, true, true)));
        assertTrue(e.getMessage().contains("no sequence modes"), e.getMessage());
    }

    @Test
    void mergingGivesTheSameBytesAsWritingEverythingAtOnce() throws IOException {
        int[][] docs = {{1, 2, 3}, {4}, {}, {5, 6}, {7, 8, 9, 10}};
        Path a = dir.resolve("a");
        Path b = dir.resolve("b");
        Path whole = dir.resolve("whole");
        try (IndexedDatasetWriter wa = IndexedDatasetWriter.create(a, DType.UINT16);
             IndexedDatasetWriter wb = IndexedDatasetWriter.create(b, DType.UINT16);
             IndexedDatasetWriter ww = IndexedDatasetWriter.create(whole, DType.UINT16)) {
            for (int d = 0; d < docs.length; d++) {
                IndexedDatasetWriter part = d < 2 ? wa : wb;
                for (IndexedDatasetWriter w : List.of(part, ww)) {
                    if (docs[d].length > 0) {
                        w.addSequence(docs[d]);
                    }
                    w.endDocument();
                }
            }
            wa.finish();
            wb.finish();
            ww.finish();
        }
        Path merged = dir.resolve("merged");
        IndexedDatasetWriter.merge(List.of(a, b), merged);
        assertArrayEquals(Files.readAllBytes(DatasetFiles.idx(whole)), Files.readAllBytes(DatasetFiles.idx(merged)));
        assertArrayEquals(Files.readAllBytes(DatasetFiles.bin(whole)), Files.readAllBytes(DatasetFiles.bin(merged)));
    }

    @Test
    void mergingDatasetsOfDifferentDtypesFails() throws IOException {
        Path a = dir.resolve("a16");
        Path b = dir.resolve("b32");
        try (IndexedDatasetWriter w = IndexedDatasetWriter.create(a, DType.UINT16)) {
            w.addDocument(new int[] {1});
            w.finish();
        }
        try (IndexedDatasetWriter w = IndexedDatasetWriter.create(b, DType.INT32)) {
            w.addDocument(new int[] {1});
            w.finish();
        }
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> IndexedDatasetWriter.merge(List.of(a, b), dir.resolve("m")));
        assertTrue(e.getMessage().contains("int32") && e.getMessage().contains("uint16"), e.getMessage());
        assertFalse(Files.exists(dir.resolve("m.bin.partial")));
    }

    @Test
    void tokensThatDoNotFitTheDtypeAreRejected() throws IOException {
        try (IndexedDatasetWriter w = IndexedDatasetWriter.create(dir.resolve("small"), DType.UINT16)) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> w.addSequence(new int[] {1, 70000}));
            assertTrue(e.getMessage().contains("70000") && e.getMessage().contains("uint16") && e.getMessage().contains("position 1"),
                    e.getMessage());
            assertThrows(IllegalArgumentException.class, () -> w.addSequence(new double[] {1.5}));
        }
    }

    @Test
    void anUnfinishedWriterLeavesNoFiles() throws IOException {
        Path prefix = dir.resolve("abandoned");
        try (IndexedDatasetWriter w = IndexedDatasetWriter.create(prefix, DType.UINT16)) {
            w.addDocument(new int[] {1, 2});
        }
        try (var files = Files.list(dir)) {
            assertEquals(List.of(), files.toList());
        }
        try (IndexedDatasetWriter w = IndexedDatasetWriter.create(prefix, DType.UINT16)) {
            w.addSequence(new int[] {1});
            IllegalStateException e = assertThrows(IllegalStateException.class, w::finish);
            assertTrue(e.getMessage().contains("endDocument"), e.getMessage());
        }
    }

    @Test
    void smallestDtypeFollowsTheVocabulary() {
        assertEquals(DType.UINT16, DType.smallestFor(257));
        assertEquals(DType.UINT16, DType.smallestFor(65_536));
        assertEquals(DType.INT32, DType.smallestFor(65_537));
        assertEquals(DType.INT32, DType.smallestFor(128_256));
    }
}
