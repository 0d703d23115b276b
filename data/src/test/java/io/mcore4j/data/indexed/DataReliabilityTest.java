package io.mcore4j.data.indexed;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.mcore4j.data.gpt.GptDatasetBuilder;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.channels.FileChannel;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Reliability (issue 22, items 5 and 9): a {@code .bin} truncated while a run reads it fails naming
 * the file, and token ids outside the model's vocabulary are found before training, naming the
 * file, document, position and id.
 */
class DataReliabilityTest {
    @TempDir
    Path dir;

    private Path dataset(DType dtype, int documents, int length, int badDocument, int badPosition, int badId)
            throws IOException {
        Path prefix = dir.resolve("corpus_" + dtype);
        try (IndexedDatasetWriter w = IndexedDatasetWriter.create(prefix, dtype)) {
            for (int d = 0; d < documents; d++) {
                int[] tokens = new int[length];
                for (int i = 0; i < length; i++) {
                    tokens[i] = (d * 31 + i) % 100;
                }
                if (d == badDocument) {
                    tokens[badPosition] = badId;
                }
                w.addDocument(tokens);
            }
            w.finish();
        }
        return prefix;
    }

    @Test
    void aBinTruncatedWhileMappedFailsNamingTheFile() throws IOException {
        Path prefix = dataset(DType.INT32, 8, 4096, -1, 0, 0);
        try (IndexedDatasetReader reader = IndexedDatasetReader.open(prefix)) {
            int[] tokens = new int[16];
            reader.readDocument(7, 0, 16, tokens, 0);
            assertEquals(7 * 31 % 100, tokens[0]);
            try (FileChannel ch = FileChannel.open(DatasetFiles.bin(prefix), StandardOpenOption.WRITE)) {
                ch.truncate(4096); // keeps the first page; documents 1.. are gone
            }
            UncheckedIOException e = assertThrows(UncheckedIOException.class, () -> reader.readDocument(7, 0, 16, tokens, 0));
            CorruptDatasetException cause = assertInstanceOf(CorruptDatasetException.class, e.getCause());
            assertEquals(DatasetFiles.bin(prefix), cause.file());
            assertTrue(e.getMessage().contains(DatasetFiles.bin(prefix).toString())
                    && e.getMessage().contains("truncated") && e.getMessage().contains("on disk now 4096 bytes"), e.getMessage());
            UncheckedIOException check = assertThrows(UncheckedIOException.class, () -> reader.checkTokenIds(50));
            assertTrue(check.getMessage().contains("truncated"), check.getMessage());
        }
    }

    @Test
    void tokenIdsOutsideTheVocabularyAreNamed() throws IOException {
        Path prefix = dataset(DType.INT32, 5, 300, 3, 217, 4242);
        try (IndexedDatasetReader reader = IndexedDatasetReader.open(prefix)) {
            reader.checkTokenIds(4243);
            CorruptDatasetException e = assertThrows(CorruptDatasetException.class, () -> reader.checkTokenIds(4242));
            assertEquals(DatasetFiles.bin(prefix), e.file());
            assertTrue(e.getMessage().contains("token id 4242 at position 217 of document 3")
                    && e.getMessage().contains("[0, 4242)"), e.getMessage());
        }
        Path negative = dataset(DType.INT32, 2, 10, 1, 0, -5);
        try (IndexedDatasetReader reader = IndexedDatasetReader.open(negative)) {
            CorruptDatasetException e = assertThrows(CorruptDatasetException.class, () -> reader.checkTokenIds(100));
            assertTrue(e.getMessage().contains("token id -5 at position 0 of document 1"), e.getMessage());
        }
        Path uint16 = dataset(DType.UINT16, 3, 10, 2, 9, 300);
        try (IndexedDatasetReader reader = IndexedDatasetReader.open(uint16)) {
            reader.checkTokenIds(1 << 16); // nothing a uint16 can hold is outside: no scan
            CorruptDatasetException e = assertThrows(CorruptDatasetException.class, () -> reader.checkTokenIds(257));
            assertTrue(e.getMessage().contains("token id 300 at position 9 of document 2"), e.getMessage());
        }
    }

    @Test
    void theBuilderChecksEveryDatasetOfTheBlendAgainstItsVocabSize() throws IOException {
        Path prefix = dataset(DType.UINT16, 6, 200, 4, 5, 1000);
        GptDatasetBuilder builder = GptDatasetBuilder.create().dataPath(prefix.toString()).sequenceLength(16)
                .samples(10, 0, 0).cache(false);
        builder.build().close(); // no vocabulary size: not checked
        CorruptDatasetException e = assertThrows(CorruptDatasetException.class, () -> builder.vocabSize(257).build());
        assertTrue(e.getMessage().contains("token id 1000 at position 5 of document 4"), e.getMessage());
        builder.vocabSize(1001).build().close();
        assertThrows(IllegalArgumentException.class, () -> builder.vocabSize(0));
        assertArrayEquals(new int[0], new int[0]);
    }
}
