package io.mcore4j.parallel.nccl;

/**
 * How one transfer of {@code count} elements is split into NCCL calls of at most
 * {@code chunkElements} elements each: chunk {@code i} covers elements
 * {@code [offset(i), offset(i) + length(i))}. Every chunk but the last is full; a count of zero has
 * no chunks. Both ends of a transfer compute the same plan from the same count, so their calls match.
 *
 * @param count elements to move, at least 0
 * @param chunkElements largest chunk, at least 1
 */
record ChunkPlan(long count, long chunkElements) {

    /** Validates the sizes. */
    ChunkPlan {
        if (count < 0) {
            throw new IllegalArgumentException("element count must not be negative, got " + count);
        }
        if (chunkElements < 1) {
            throw new IllegalArgumentException("chunk size must be at least one element, got " + chunkElements);
        }
    }

    /**
     * The plan for {@code count} elements of {@code elementBytes} bytes each, in chunks of at most
     * {@code maxChunkBytes} bytes (but at least one element).
     *
     * @param count elements
     * @param elementBytes bytes per element, at least 1
     * @param maxChunkBytes largest chunk in bytes, at least 1
     * @return the plan
     */
    static ChunkPlan of(long count, int elementBytes, long maxChunkBytes) {
        if (elementBytes < 1) {
            throw new IllegalArgumentException("element size must be at least one byte, got " + elementBytes);
        }
        if (maxChunkBytes < 1) {
            throw new IllegalArgumentException("chunk size must be at least one byte, got " + maxChunkBytes);
        }
        return new ChunkPlan(count, Math.max(1, maxChunkBytes / elementBytes));
    }

    /** @return number of chunks: 0 for no elements, else {@code ceil(count / chunkElements)} */
    int chunks() {
        return (int) Math.min(Integer.MAX_VALUE, (count + chunkElements - 1) / chunkElements);
    }

    /**
     * @param chunk index in {@code [0, chunks())}
     * @return first element of the chunk
     */
    long offset(int chunk) {
        check(chunk);
        return chunk * chunkElements;
    }

    /**
     * @param chunk index in {@code [0, chunks())}
     * @return elements in the chunk
     */
    long length(int chunk) {
        check(chunk);
        return Math.min(chunkElements, count - chunk * chunkElements);
    }

    private void check(int chunk) {
        if (chunk < 0 || chunk >= chunks()) {
            throw new IndexOutOfBoundsException("chunk " + chunk + " is outside [0, " + chunks() + ") for "
                    + count + " elements in chunks of " + chunkElements);
        }
    }
}
