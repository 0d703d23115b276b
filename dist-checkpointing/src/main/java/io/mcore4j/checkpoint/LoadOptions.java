package io.mcore4j.checkpoint;

/**
 * Options of a load; every rank of one load must pass equal options.
 *
 * @param verifyChecksums check the size and CRC32C of every shard file holding a requested key
 *     before reading any tensor (default true). The files are spread over the ranks, so the whole
 *     checkpoint is read once in total, in parallel.
 * @param readChunkBytes most bytes staged in host memory at once per rank while copying a piece
 *     into a target (default 32 MiB; a single innermost row larger than this is staged whole)
 */
public record LoadOptions(boolean verifyChecksums, int readChunkBytes) {
    /** Default staging size, 32 MiB. */
    public static final int DEFAULT_READ_CHUNK_BYTES = 32 << 20;

    /**
     * @throws IllegalArgumentException if the chunk size is not positive
     */
    public LoadOptions {
        if (readChunkBytes <= 0) {
            throw new IllegalArgumentException("read chunk size " + readChunkBytes + " must be positive");
        }
    }

    /** @return checksums verified, 32 MiB staging */
    public static LoadOptions defaults() {
        return new LoadOptions(true, DEFAULT_READ_CHUNK_BYTES);
    }

    /**
     * @param on whether to verify checksums
     * @return a copy with that setting
     */
    public LoadOptions withVerifyChecksums(boolean on) {
        return new LoadOptions(on, readChunkBytes);
    }

    /**
     * @param bytes staging size
     * @return a copy with that setting
     */
    public LoadOptions withReadChunkBytes(int bytes) {
        return new LoadOptions(verifyChecksums, bytes);
    }
}
