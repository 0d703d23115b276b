package io.mcore4j.data.gpt;

/**
 * The SplitMix64 finalizer (Steele, Lea and Flood, 2014) that {@link MockGptDataset} derives its synthetic
 * tokens from. It is spelled out here rather than taken from {@code java.util} so that mock data never
 * changes with the JDK. (Real datasets shuffle with {@link NumpyRandomState}, as Megatron does.)
 */
final class SplitMix64 {
    private SplitMix64() {}

    static long mix(long z) {
        z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
        z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
        return z ^ (z >>> 31);
    }
}
