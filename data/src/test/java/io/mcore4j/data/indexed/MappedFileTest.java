package io.mcore4j.data.indexed;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.io.RandomAccessFile;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.Random;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class MappedFileTest {
    @TempDir
    Path dir;

    private static byte[] bytes(ByteBuffer b) {
        byte[] out = new byte[b.remaining()];
        b.duplicate().get(out);
        return out;
    }

    @Test
    void smallSegmentsReadEveryRangeCorrectly() throws IOException {
        byte[] data = new byte[1000];
        new Random(7).nextBytes(data);
        Path file = dir.resolve("f");
        Files.write(file, data);
        try (MappedFile m = MappedFile.open(file, 64, 16)) {
            assertEquals(1000, m.size());
            for (int p = 0; p + 8 <= data.length; p++) {
                long expected = 0;
                for (int k = 7; k >= 0; k--) {
                    expected = (expected << 8) | (data[p + k] & 0xFF);
                }
                assertEquals(expected, m.getLong(p), "long at " + p);
                assertEquals((int) expected, m.getInt(p), "int at " + p);
            }
            for (int p = 0; p < 1000; p += 13) {
                for (int len : new int[] {0, 1, 16, 17, 100, 1000 - p}) {
                    if (p + len <= 1000) {
                        assertArrayEquals(Arrays.copyOfRange(data, p, p + len), bytes(m.slice(p, len)), p + "+" + len);
                    }
                }
            }
            assertTrue(m.isContiguous(60, 16)); // inside the overlap of segment 0
            assertFalse(m.isContiguous(60, 21)); // reaches past it: copied
            assertThrows(IndexOutOfBoundsException.class, () -> m.slice(990, 11));
        }
    }

    @Test
    void aClosedFileRefusesReads() throws IOException {
        Path file = dir.resolve("g");
        Files.write(file, new byte[16]);
        MappedFile m = MappedFile.open(file);
        m.close();
        IllegalStateException e = assertThrows(IllegalStateException.class, () -> m.getLong(0));
        assertTrue(e.getMessage().contains("closed"));
    }

    @Test
    void readerWithTinySegmentsReturnsTheSameTokens() throws IOException {
        Path prefix = dir.resolve("tiny");
        int[][] docs = new int[20][];
        Random random = new Random(3);
        try (IndexedDatasetWriter w = IndexedDatasetWriter.create(prefix, DType.INT32)) {
            for (int d = 0; d < docs.length; d++) {
                docs[d] = random.ints(1 + random.nextInt(40), 0, 1 << 20).toArray();
                w.addDocument(docs[d]);
            }
            w.finish();
        }
        try (IndexedDatasetReader r = IndexedDatasetReader.open(prefix, new IndexedDatasetReader.Options(64, 8, true, false))) {
            for (int d = 0; d < docs.length; d++) {
                assertArrayEquals(docs[d], r.sequence(d).toIntArray(), "document " + d);
            }
        }
    }

    /** A sparse .bin of 3 GiB: the reader maps it in segments and reads tokens beyond 2 GiB. */
    @Test
    void filesOver2GiBAreMappedInSegments() throws IOException {
        Path prefix = dir.resolve("huge");
        long firstLength = (5L << 29) / 2; // 2.5 GiB of uint16 zeros
        long pointer = 2 * firstLength;
        int[] tail = {1, 2, 65535, 4};
        try (RandomAccessFile bin = new RandomAccessFile(DatasetFiles.bin(prefix).toFile(), "rw")) {
            bin.setLength(pointer + 2L * tail.length);
            bin.seek(pointer);
            LittleEndianBytes b = new LittleEndianBytes();
            for (int t : tail) {
                b.u16(t);
            }
            bin.write(b.toByteArray());
        }
        Files.write(DatasetFiles.idx(prefix), LittleEndianBytes.idx(8, new int[] {(int) firstLength, tail.length},
                new long[] {0, pointer}, new long[] {0, 1, 2}, null));
        try (IndexedDatasetReader r = IndexedDatasetReader.open(prefix)) {
            assertEquals(pointer + 8, r.binSize());
            assertArrayEquals(tail, r.sequence(1).toIntArray());
            // a window across the 2 GiB mark, inside one segment thanks to the overlap
            TokenView across = r.sequence(0, (int) ((1L << 30) - 3), 8);
            assertArrayEquals(new int[8], across.toIntArray());
            int[] document = new int[3];
            r.readDocument(1, 1, 3, document, 0);
            assertArrayEquals(new int[] {2, 65535, 4}, document);
        }
    }
}
