package io.mcore4j.core.random;

/** The SplitMix64 finaliser (Steele, Lea and Flood, 2014): a bijective 64-bit mixing function. */
final class SplitMix64 {
    private SplitMix64() {}

    static long mix(long z) {
        z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
        z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
        return z ^ (z >>> 31);
    }
}
