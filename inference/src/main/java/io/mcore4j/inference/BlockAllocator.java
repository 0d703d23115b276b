package io.mcore4j.inference;

import java.util.Arrays;

/**
 * Hands out the blocks of a paged key/value cache ({@link PagedKvCache}): block ids {@code 1..numBlocks-1} from a
 * free list, block 0 being the null block that padded rows of a batch write to and that no sequence owns. A
 * request takes the blocks its positions need and gives every one back when it ends, so that after all requests
 * end {@link #freeBlocks()} is {@link #capacity()} again. Thread-safe (the engine's thread allocates; anyone may
 * read the counts).
 */
public final class BlockAllocator {
    private final int numBlocks;
    private final int[] free;
    private final boolean[] owned;
    private int freeCount;

    /**
     * @param numBlocks blocks of the pools, the null block included (at least 2)
     * @throws IllegalArgumentException if fewer than 2
     */
    public BlockAllocator(int numBlocks) {
        if (numBlocks < 2) {
            throw new IllegalArgumentException("a paged cache needs at least 2 blocks (block 0 is the null block), got "
                    + numBlocks);
        }
        this.numBlocks = numBlocks;
        this.free = new int[numBlocks - 1];
        this.owned = new boolean[numBlocks];
        for (int i = 0; i < free.length; i++) {
            free[i] = numBlocks - 1 - i; // popped from the end: block 1 first
        }
        this.freeCount = free.length;
    }

    /** @return blocks a sequence may own: all but the null block */
    public int capacity() {
        return numBlocks - 1;
    }

    /** @return blocks free now */
    public synchronized int freeBlocks() {
        return freeCount;
    }

    /**
     * Takes {@code n} free blocks.
     *
     * @param n how many
     * @return their ids, or null (nothing taken) if fewer than {@code n} are free
     */
    public synchronized int[] allocate(int n) {
        if (n < 0) {
            throw new IllegalArgumentException("cannot allocate " + n + " blocks");
        }
        if (n > freeCount) {
            return null;
        }
        int[] out = new int[n];
        for (int i = 0; i < n; i++) {
            int block = free[--freeCount];
            owned[block] = true;
            out[i] = block;
        }
        return out;
    }

    /**
     * Gives blocks back.
     *
     * @param blocks ids from {@link #allocate}
     * @throws IllegalArgumentException if one is not allocated now (given back twice, or the null block)
     */
    public synchronized void free(int[] blocks) {
        for (int block : blocks) {
            if (block <= 0 || block >= numBlocks || !owned[block]) {
                throw new IllegalArgumentException("block " + block + " is not allocated (of " + Arrays.toString(blocks)
                        + ")");
            }
            owned[block] = false;
            free[freeCount++] = block;
        }
    }
}
