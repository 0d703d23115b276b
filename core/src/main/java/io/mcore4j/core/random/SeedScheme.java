package io.mcore4j.core.random;

import java.nio.charset.StandardCharsets;

/**
 * Derives independent 64-bit seeds from a base seed, a region name and integer coordinates.
 *
 * <p>A region is a part of the model whose randomness must vary over some parallel axes and agree
 * over the others. Passing exactly the coordinates of the varying axes gives that: dropout inside
 * the tensor-parallel region passes the tensor-parallel rank (and pipeline rank), so it differs
 * across TP ranks and agrees across data-parallel ranks. The derivation is a fixed SplitMix64
 * chain, stable across JVMs and versions.
 *
 * @param baseSeed the user's seed
 */
public record SeedScheme(long baseSeed) {

    /**
     * The seed of a region at the given coordinates.
     *
     * @param region a stable region name, e.g. {@code "tensor-parallel-dropout"}
     * @param coordinates ranks along the axes the region varies over, and any further indices (layer)
     * @return a 64-bit seed
     */
    public long seed(String region, long... coordinates) {
        long h = SplitMix64.mix(baseSeed ^ 0x6A09E667F3BCC908L);
        for (byte b : region.getBytes(StandardCharsets.UTF_8)) {
            h = SplitMix64.mix(h + (b & 0xFF));
        }
        h = SplitMix64.mix(h + 0x9E3779B97F4A7C15L * (coordinates.length + 1));
        for (long c : coordinates) {
            h = SplitMix64.mix(h ^ SplitMix64.mix(c + 0x3C6EF372FE94F82BL));
        }
        return h;
    }

    /**
     * A new generator for a region at the given coordinates.
     *
     * @param region a stable region name
     * @param coordinates ranks along the varying axes and further indices
     * @return a generator the caller owns
     */
    public DeterministicRandom generator(String region, long... coordinates) {
        return new DeterministicRandom(seed(region, coordinates));
    }
}
