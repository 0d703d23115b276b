package io.mcore4j.data.gpt;

/**
 * The seeded generator behind every shuffle of this package: a SplitMix64 stream (Steele, Lea and Flood,
 * 2014). It is spelled out here rather than taken from {@code java.util} so that the orders it produces,
 * and therefore cached indices, never change with the JDK.
 */
final class ShuffleRandom {
    private long state;

    ShuffleRandom(long seed) {
        this.state = seed;
    }

    long nextLong() {
        state += 0x9E3779B97F4A7C15L;
        return mix(state);
    }

    static long mix(long z) {
        z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
        z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
        return z ^ (z >>> 31);
    }

    /** Uniform in {@code [0, bound)}: 31-bit draws beyond the largest multiple of bound are redrawn. */
    int nextInt(int bound) {
        if (bound <= 0) {
            throw new IllegalArgumentException("bound " + bound + " must be positive");
        }
        long range = 1L << 31;
        long acceptBelow = range - range % bound;
        long u;
        do {
            u = nextLong() >>> 33;
        } while (u >= acceptBelow);
        return (int) (u % bound);
    }

    /** Fisher-Yates shuffle of {@code values[from, to)}. */
    void shuffle(int[] values, int from, int to) {
        for (int i = to - 1; i > from; i--) {
            int j = from + nextInt(i - from + 1);
            int t = values[i];
            values[i] = values[j];
            values[j] = t;
        }
    }
}
