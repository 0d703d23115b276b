package io.mcore4j.data.gpt;

import io.mcore4j.data.indexed.IndexedDatasetReader;

import java.nio.ByteBuffer;
import java.util.Arrays;
import java.util.zip.CRC32C;

/**
 * Tokenized documents that GPT samples are cut from: an indexed dataset on disk, or arrays in memory.
 * For an indexed dataset the "documents" are its sequences, as in Megatron-Core's {@code GPTDataset} (one
 * sequence per document unless the preprocessor split sentences; a document without sequences contributes
 * nothing). Implementations are safe for concurrent reads.
 */
public interface DocumentSource {
    /**
     * Number of documents.
     *
     * @return the count
     */
    long documentCount();

    /**
     * Tokens in one document.
     *
     * @param document document index
     * @return its length
     */
    int documentLength(long document);

    /**
     * Copies a window of one document.
     *
     * @param document document index
     * @param offset first token within the document
     * @param length number of tokens
     * @param destination target array
     * @param position first index written
     */
    void readTokens(long document, int offset, int length, int[] destination, int position);

    /**
     * A text that identifies the contents, used in cache keys: two sources with the same identity must hold
     * the same tokens.
     *
     * @return the identity
     */
    String identity();

    /**
     * The sequences of an indexed dataset, each one a GPT "document" as Megatron-Core's {@code GPTDataset} sees
     * it; the reader stays owned by the caller.
     *
     * @param reader an open reader
     * @return a view of its sequences
     */
    static DocumentSource of(IndexedDatasetReader reader) {
        return new DocumentSource() {
            @Override
            public long documentCount() {
                return reader.sequenceCount();
            }

            @Override
            public int documentLength(long document) {
                return reader.sequenceLength(document);
            }

            @Override
            public void readTokens(long document, int offset, int length, int[] destination, int position) {
                reader.sequence(document, offset, length).copyTo(destination, position);
            }

            @Override
            public String identity() {
                return "indexed-sequences:" + reader.prefix().toAbsolutePath().normalize() + " idx=" + reader.idxSize()
                        + " crc32c=" + Long.toHexString(reader.indexChecksum()) + " bin=" + reader.binSize() + " dtype=" + reader.dtype();
            }

            @Override
            public String toString() {
                return reader.prefix().toString();
            }
        };
    }

    /**
     * Documents held in memory (the arrays are copied).
     *
     * @param documents one token array per document
     * @return the source
     */
    static DocumentSource of(int[][] documents) {
        int[][] copy = new int[documents.length][];
        for (int d = 0; d < documents.length; d++) {
            copy[d] = documents[d].clone();
        }
        CRC32C lengths = new CRC32C();
        for (int[] d : copy) {
            lengths.update(ByteBuffer.allocate(4).putInt(0, d.length));
        }
        // document lengths are all the indices depend on; the hash of the tokens guards the rest
        String identity = "memory:" + copy.length + " lengths-crc32c=" + Long.toHexString(lengths.getValue())
                + " tokens-hash=" + Arrays.deepHashCode(copy);
        return new DocumentSource() {
            @Override
            public long documentCount() {
                return copy.length;
            }

            @Override
            public int documentLength(long document) {
                return copy[Math.toIntExact(document)].length;
            }

            @Override
            public void readTokens(long document, int offset, int length, int[] destination, int position) {
                System.arraycopy(copy[Math.toIntExact(document)], offset, destination, position, length);
            }

            @Override
            public String identity() {
                return identity;
            }

            @Override
            public String toString() {
                return "memory(" + copy.length + " documents)";
            }
        };
    }
}
