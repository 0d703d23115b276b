package io.mcore4j.data.sft;

import java.util.Arrays;

/**
 * Where whole sequences go when they are packed into rows of a fixed capacity, first-fit decreasing: the sequences
 * are taken longest first (equal lengths in index order), each into the first row with room for it, a new row when
 * none has. Nothing is random, so the same lengths always give the same plan. The rows are then numbered in the
 * order of their first (lowest-index) sequence, and each row lists its sequences in index order, so that reading the
 * rows in order reads the data roughly in its own order rather than longest first.
 *
 * <p>A segment tree over the rows' free space finds the first row with room in {@code O(log n)}: a million
 * sequences are planned in well under a second. Immutable.
 */
public final class PackingPlan {
    private final int[] items;
    private final int[] rowStart;
    private final int capacity;

    private PackingPlan(int[] items, int[] rowStart, int capacity) {
        this.items = items;
        this.rowStart = rowStart;
        this.capacity = capacity;
    }

    /**
     * Packs sequences of the given lengths.
     *
     * @param lengths every sequence's length, each in {@code [1, capacity]}
     * @param capacity a row's length
     * @return the plan
     * @throws IllegalArgumentException naming the first sequence whose length is not in {@code [1, capacity]}
     */
    public static PackingPlan firstFitDecreasing(int[] lengths, int capacity) {
        if (capacity < 1) {
            throw new IllegalArgumentException("a row's capacity " + capacity + " must be at least 1");
        }
        int n = lengths.length;
        long[] byLength = new long[n];
        for (int i = 0; i < n; i++) {
            if (lengths[i] < 1 || lengths[i] > capacity) {
                throw new IllegalArgumentException("sequence " + i + " has length " + lengths[i] + ", not in [1, " + capacity + "]");
            }
            byLength[i] = (long) (capacity - lengths[i]) << 32 | i; // longest first, then index order
        }
        Arrays.sort(byLength);
        int leaves = Integer.highestOneBit(Math.max(n, 1) * 2 - 1);
        int[] free = new int[2 * leaves]; // free[node]: the most free space of a row under it; leaves past n never fit
        for (int r = 0; r < n; r++) {
            free[leaves + r] = capacity;
        }
        for (int node = leaves - 1; node >= 1; node--) {
            free[node] = Math.max(free[2 * node], free[2 * node + 1]);
        }
        int[] rowOf = new int[n];
        for (long key : byLength) {
            int item = (int) key;
            int length = lengths[item];
            int node = 1; // n rows always hold n sequences, so some row has room
            while (node < leaves) {
                node = free[2 * node] >= length ? 2 * node : 2 * node + 1;
            }
            rowOf[item] = node - leaves;
            free[node] -= length;
            for (node /= 2; node >= 1; node /= 2) {
                free[node] = Math.max(free[2 * node], free[2 * node + 1]);
            }
        }
        // renumber the rows by their first sequence, and list each row's sequences in index order
        int[] rank = new int[n];
        Arrays.fill(rank, -1);
        int rows = 0;
        int[] count = new int[n + 1];
        for (int item = 0; item < n; item++) {
            if (rank[rowOf[item]] < 0) {
                rank[rowOf[item]] = rows++;
            }
            count[rank[rowOf[item]] + 1]++;
        }
        int[] rowStart = Arrays.copyOf(count, rows + 1);
        for (int r = 0; r < rows; r++) {
            rowStart[r + 1] += rowStart[r];
        }
        int[] next = Arrays.copyOf(rowStart, rows);
        int[] items = new int[n];
        for (int item = 0; item < n; item++) {
            items[next[rank[rowOf[item]]]++] = item;
        }
        return new PackingPlan(items, rowStart, capacity);
    }

    /** @return the number of rows */
    public int rows() {
        return rowStart.length - 1;
    }

    /** @return a row's length */
    public int capacity() {
        return capacity;
    }

    /**
     * @param row a row index in {@code [0, rows())}
     * @return the indices of the row's sequences, ascending (a new array)
     * @throws IndexOutOfBoundsException if the row is outside the plan
     */
    public int[] row(int row) {
        if (row < 0 || row >= rows()) {
            throw new IndexOutOfBoundsException("row " + row + " is outside [0, " + rows() + ")");
        }
        return Arrays.copyOfRange(items, rowStart[row], rowStart[row + 1]);
    }
}
