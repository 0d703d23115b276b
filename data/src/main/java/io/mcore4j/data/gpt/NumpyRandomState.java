package io.mcore4j.data.gpt;

/**
 * numpy's legacy {@code numpy.random.RandomState(seed)}, reproduced bit for bit for the calls Megatron-Core's
 * datasets make: the MT19937 stream seeded from a 32-bit integer, {@code shuffle} of a one-dimensional array
 * and {@code permutation(n)}.
 *
 * <p>Seeding is MT19937's {@code init_genrand} (numpy's {@code _legacy_seeding} for an integer seed).
 * {@code shuffle} is numpy's Fisher-Yates loop from the last element down, drawing each swap partner with
 * {@code random_interval(max)}: the smallest all-ones bit mask covering {@code max}, then 32-bit outputs
 * (64-bit ones, two outputs high word first, when {@code max} exceeds 32 bits) masked and redrawn until they
 * are at most {@code max}. The element type does not enter the stream, so {@code int} arrays stand in for
 * numpy's {@code int32}/{@code uint32}/{@code int64} ones.
 *
 * <p>Holds mutable generator state: not thread-safe, one instance per index build.
 */
public final class NumpyRandomState {
    private static final int N = 624;
    private static final int M = 397;
    private static final int MATRIX_A = 0x9908b0df;
    private static final int UPPER_MASK = 0x80000000;
    private static final int LOWER_MASK = 0x7fffffff;

    private final int[] mt = new int[N];
    private int position;

    /**
     * Seeds the generator as {@code numpy.random.RandomState(seed)} does.
     *
     * @param seed in {@code [0, 2^32 - 1]}, numpy's range for an integer seed
     * @throws IllegalArgumentException if the seed is outside that range, as numpy raises ValueError
     */
    public NumpyRandomState(long seed) {
        if (seed < 0 || seed > 0xFFFF_FFFFL) {
            throw new IllegalArgumentException("seed " + seed + " must be between 0 and 2**32 - 1 (numpy's RandomState range)");
        }
        mt[0] = (int) seed;
        for (int i = 1; i < N; i++) {
            mt[i] = 1812433253 * (mt[i - 1] ^ (mt[i - 1] >>> 30)) + i;
        }
        position = N;
    }

    /**
     * One word of the state vector, as {@code get_state()[1][i]} shows it.
     *
     * @param i index in {@code [0, 624)}
     * @return the unsigned 32-bit word
     */
    long stateWord(int i) {
        return mt[i] & 0xFFFF_FFFFL;
    }

    /**
     * The next 32-bit output of MT19937 (numpy's {@code next_uint32}).
     *
     * @return the output as an unsigned value in a long
     */
    public long nextUint32() {
        if (position >= N) {
            regenerate();
        }
        int y = mt[position++];
        y ^= y >>> 11;
        y ^= (y << 7) & 0x9d2c5680;
        y ^= (y << 15) & 0xefc60000;
        y ^= y >>> 18;
        return y & 0xFFFF_FFFFL;
    }

    private void regenerate() {
        int k;
        for (k = 0; k < N - M; k++) {
            int y = (mt[k] & UPPER_MASK) | (mt[k + 1] & LOWER_MASK);
            mt[k] = mt[k + M] ^ (y >>> 1) ^ (-(y & 1) & MATRIX_A);
        }
        for (; k < N - 1; k++) {
            int y = (mt[k] & UPPER_MASK) | (mt[k + 1] & LOWER_MASK);
            mt[k] = mt[k + (M - N)] ^ (y >>> 1) ^ (-(y & 1) & MATRIX_A);
        }
        int y = (mt[N - 1] & UPPER_MASK) | (mt[0] & LOWER_MASK);
        mt[N - 1] = mt[M - 1] ^ (y >>> 1) ^ (-(y & 1) & MATRIX_A);
        position = 0;
    }

    /**
     * A uniform integer in {@code [0, max]} by masked rejection (numpy's {@code random_interval}).
     *
     * @param max the inclusive upper bound, non-negative
     * @return the draw
     */
    public long interval(long max) {
        if (max < 0) {
            throw new IllegalArgumentException("interval bound " + max + " must not be negative");
        }
        if (max == 0) {
            return 0;
        }
        long mask = max;
        mask |= mask >>> 1;
        mask |= mask >>> 2;
        mask |= mask >>> 4;
        mask |= mask >>> 8;
        mask |= mask >>> 16;
        mask |= mask >>> 32;
        long value;
        if (max <= 0xFFFF_FFFFL) {
            do {
                value = nextUint32() & mask;
            } while (value > max);
        } else {
            do {
                value = ((nextUint32() << 32) | nextUint32()) & mask;
            } while (value > max);
        }
        return value;
    }

    /**
     * Shuffles {@code values[from, to)} in place as {@code RandomState.shuffle} shuffles a one-dimensional
     * array holding exactly those elements.
     *
     * @param values the array
     * @param from first index of the shuffled range
     * @param to end of the shuffled range (exclusive)
     */
    public void shuffle(int[] values, int from, int to) {
        if (from < 0 || to > values.length || from > to) {
            throw new IndexOutOfBoundsException("range [" + from + ", " + to + ") of an array of " + values.length);
        }
        for (int i = to - from - 1; i >= 1; i--) {
            int j = (int) interval(i);
            int t = values[from + i];
            values[from + i] = values[from + j];
            values[from + j] = t;
        }
    }

    /**
     * {@code RandomState.permutation(n)}: {@code 0 .. n-1} shuffled.
     *
     * @param n the length, non-negative
     * @return a new array
     */
    public int[] permutation(int n) {
        if (n < 0) {
            throw new IllegalArgumentException("permutation length " + n + " must not be negative");
        }
        int[] values = new int[n];
        for (int i = 0; i < n; i++) {
            values[i] = i;
        }
        shuffle(values, 0, n);
        return values;
    }
}
