package io.mcore4j.data.indexed;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Every way a dataset can contradict its format is reported with the file and the values read. */
class IndexedDatasetCorruptionTest {
    @TempDir
    Path dir;

    /** A valid uint16 dataset: 3 sequences of lengths 3, 2, 4 in 3 documents. */
    private Path valid() throws IOException {
        Path prefix = dir.resolve("data");
        try (IndexedDatasetWriter w = IndexedDatasetWriter.create(prefix, DType.UINT16)) {
            w.addDocument(new int[] {1, 2, 3});
            w.addDocument(new int[] {4, 5});
            w.addDocument(new int[] {6, 7, 8, 9});
            w.finish();
        }
        return prefix;
    }

    private CorruptDatasetException corruptIdx(Path prefix, int offset, byte[] replacement) throws IOException {
        Path idx = DatasetFiles.idx(prefix);
        byte[] bytes = Files.readAllBytes(idx);
        System.arraycopy(replacement, 0, bytes, offset, replacement.length);
        Files.write(idx, bytes);
        return assertThrows(CorruptDatasetException.class, () -> IndexedDatasetReader.open(prefix).close());
    }

    private static void assertMessage(CorruptDatasetException e, Path file, String... parts) {
        assertEquals(file, e.file());
        assertTrue(e.getMessage().startsWith("file " + file + ": "), e.getMessage());
        for (String part : parts) {
            assertTrue(e.getMessage().contains(part), "\"" + e.getMessage() + "\" should contain \"" + part + "\"");
        }
    }

    @Test
    void badMagic() throws IOException {
        Path prefix = valid();
        CorruptDatasetException e = corruptIdx(prefix, 0, "MMIDIDY".getBytes(java.nio.charset.StandardCharsets.US_ASCII));
        assertMessage(e, DatasetFiles.idx(prefix), "bad magic 0x4d4d49444944590000", "MMIDIDX");
    }

    @Test
    void unknownVersion() throws IOException {
        Path prefix = valid();
        CorruptDatasetException e = corruptIdx(prefix, 9, new LittleEndianBytes().i64(2).toByteArray());
        assertMessage(e, DatasetFiles.idx(prefix), "version 2 is unsupported (expected 1)");
    }

    @Test
    void unknownDtypeCodes() throws IOException {
        for (int code : new int[] {0, 9, 255}) {
            Path prefix = valid();
            CorruptDatasetException e = corruptIdx(prefix, 17, new byte[] {(byte) code});
            assertMessage(e, DatasetFiles.idx(prefix), "dtype code " + code + " is unknown (expected 1-8)");
        }
    }

    @Test
    void truncatedHeader() throws IOException {
        Path prefix = valid();
        Path idx = DatasetFiles.idx(prefix);
        Files.write(idx, Arrays.copyOf(Files.readAllBytes(idx), 20));
        CorruptDatasetException e = assertThrows(CorruptDatasetException.class, () -> IndexedDatasetReader.open(prefix));
        assertMessage(e, idx, "header is truncated: 20 bytes, need 34");
    }

    @Test
    void sequenceCountThatOverrunsTheFile() throws IOException {
        Path prefix = valid();
        CorruptDatasetException e = corruptIdx(prefix, 18, new LittleEndianBytes().i64(1000).toByteArray());
        assertMessage(e, DatasetFiles.idx(prefix), "sequence count 1000", "overrun the file", "the file has 102");
    }

    @Test
    void documentCountThatOverrunsTheFile() throws IOException {
        Path prefix = valid();
        CorruptDatasetException e = corruptIdx(prefix, 26, new LittleEndianBytes().i64(5).toByteArray());
        assertMessage(e, DatasetFiles.idx(prefix), "document count 5", "need 110 bytes");
    }

    @Test
    void countsBeyond2To63AreNotTakenAsNegative() throws IOException {
        Path prefix = valid();
        CorruptDatasetException e = corruptIdx(prefix, 18, new LittleEndianBytes().i64(-1).toByteArray());
        assertMessage(e, DatasetFiles.idx(prefix), "sequence count 18446744073709551615", "more than 2^63");
    }

    @Test
    void countsThatLeaveBytesOver() throws IOException {
        Path prefix = valid();
        CorruptDatasetException e = corruptIdx(prefix, 26, new LittleEndianBytes().i64(3).toByteArray());
        assertMessage(e, DatasetFiles.idx(prefix), "size 102 does not match its header", "need 94 bytes");
    }

    @Test
    void pointerPastTheEndOfTheBin() throws IOException {
        Path prefix = valid();
        // pointer of sequence 2 (at 34 + 3*4 + 2*8) moved to byte 20: 20 + 4 tokens * 2 bytes > 18
        CorruptDatasetException e = corruptIdx(prefix, 34 + 12 + 16, new LittleEndianBytes().i64(20).toByteArray());
        assertMessage(e, DatasetFiles.bin(prefix), "sequence 2 (pointer 20, 4 tokens of uint16) ends past the end of the file (18 bytes)");
    }

    @Test
    void truncatedBin() throws IOException {
        Path prefix = valid();
        Path bin = DatasetFiles.bin(prefix);
        Files.write(bin, Arrays.copyOf(Files.readAllBytes(bin), 15));
        CorruptDatasetException e = assertThrows(CorruptDatasetException.class, () -> IndexedDatasetReader.open(prefix));
        assertMessage(e, bin, "sequence 2 (pointer 10, 4 tokens of uint16) ends past the end of the file (15 bytes)");
    }

    @Test
    void misalignedAndNegativePointers() throws IOException {
        Path prefix = valid();
        CorruptDatasetException e = corruptIdx(prefix, 34 + 12 + 8, new LittleEndianBytes().i64(7).toByteArray());
        assertMessage(e, DatasetFiles.idx(prefix), "sequence 1 has pointer 7 (expected a non-negative multiple of 2)");
        Path again = valid();
        e = corruptIdx(again, 34 + 12 + 8, new LittleEndianBytes().i64(-2).toByteArray());
        assertMessage(e, DatasetFiles.idx(again), "sequence 1 has pointer -2");
    }

    @Test
    void negativeLength() throws IOException {
        Path prefix = valid();
        CorruptDatasetException e = corruptIdx(prefix, 34 + 4, new LittleEndianBytes().i32(-1).toByteArray());
        assertMessage(e, DatasetFiles.idx(prefix), "sequence 1 has negative length -1");
    }

    @Test
    void documentIndicesThatDoNotStartAtZeroDecreaseOrStopShort() throws IOException {
        int docs = 34 + 36;
        Path prefix = valid();
        assertMessage(corruptIdx(prefix, docs, new LittleEndianBytes().i64(1).toByteArray()), DatasetFiles.idx(prefix),
                "document index 0 is 1 (expected 0)");
        prefix = valid();
        assertMessage(corruptIdx(prefix, docs + 16, new LittleEndianBytes().i64(0).toByteArray()), DatasetFiles.idx(prefix),
                "document index 2 is 0 (expected 1..3, non-decreasing)");
        prefix = valid();
        assertMessage(corruptIdx(prefix, docs + 24, new LittleEndianBytes().i64(2).toByteArray()), DatasetFiles.idx(prefix),
                "last document index is 2 but there are 3 sequences");
        prefix = valid();
        assertMessage(corruptIdx(prefix, docs + 24, new LittleEndianBytes().i64(99).toByteArray()), DatasetFiles.idx(prefix),
                "document index 3 is 99");
    }

    @Test
    void withoutFullValidationACorruptSequenceFailsWhenRead() throws IOException {
        Path prefix = valid();
        Path idx = DatasetFiles.idx(prefix);
        byte[] bytes = Files.readAllBytes(idx);
        System.arraycopy(new LittleEndianBytes().i64(1L << 40).toByteArray(), 0, bytes, 34 + 12 + 16, 8);
        Files.write(idx, bytes);
        IndexedDatasetReader.Options lazy = new IndexedDatasetReader.Options(MappedFile.DEFAULT_SEGMENT_BYTES,
                MappedFile.DEFAULT_OVERLAP_BYTES, false, false);
        try (IndexedDatasetReader r = IndexedDatasetReader.open(prefix, lazy)) {
            assertEquals(3, r.sequence(0).getInt(2));
            IllegalStateException e = assertThrows(IllegalStateException.class, () -> r.sequence(2));
            assertTrue(e.getMessage().contains(DatasetFiles.bin(prefix).toString()) && e.getMessage().contains("past the end"), e.getMessage());
        }
    }

    @Test
    void aMissingBinIsAnIoError() throws IOException {
        Path prefix = valid();
        Files.delete(DatasetFiles.bin(prefix));
        IOException e = assertThrows(IOException.class, () -> IndexedDatasetReader.open(prefix));
        assertTrue(e.getMessage().contains("data.bin"), e.getMessage());
    }
}
