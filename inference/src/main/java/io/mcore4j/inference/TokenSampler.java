package io.mcore4j.inference;

import io.mcore4j.core.random.DeterministicRandom;

import java.util.Arrays;

/**
 * Picks one request's next token from a row of logits on the Java side, with the request's own seeded
 * generator, so that every rank holding the same logits picks the same token. The order of candidates is
 * fixed (logit descending, then id ascending), so a draw depends only on the logits and the generator's
 * position. Not thread-safe: one sampler per request.
 */
final class TokenSampler {
    private final SamplingParams params;
    private final DeterministicRandom random;

    TokenSampler(SamplingParams params) {
        this.params = params;
        this.random = new DeterministicRandom(params.seed());
    }

    /**
     * @param logits the request's logits over the vocabulary (only the first {@code vocabulary} are candidates)
     * @param vocabulary number of candidate ids
     * @return the chosen id
     */
    int next(float[] logits, int vocabulary) {
        if (params.isGreedy()) {
            return argmax(logits, vocabulary);
        }
        long[] order = descending(logits, vocabulary);
        int kept = params.topK() > 0 ? Math.min(params.topK(), vocabulary) : vocabulary;
        double max = logits[id(order[0])] / params.temperature();
        double[] weights = new double[kept];
        double total = 0;
        for (int i = 0; i < kept; i++) {
            weights[i] = Math.exp(logits[id(order[i])] / params.temperature() - max);
            total += weights[i];
        }
        if (params.topP() > 0) {
            // the smallest prefix whose probability reaches top-p; the most likely token always stays
            double cumulative = 0;
            int cut = kept;
            for (int i = 0; i < kept; i++) {
                cumulative += weights[i] / total;
                if (cumulative >= params.topP()) {
                    cut = i + 1;
                    break;
                }
            }
            kept = cut;
            total = 0;
            for (int i = 0; i < kept; i++) {
                total += weights[i];
            }
        }
        double u = random.nextDouble() * total;
        double cumulative = 0;
        for (int i = 0; i < kept; i++) {
            cumulative += weights[i];
            if (u < cumulative) {
                return id(order[i]);
            }
        }
        return id(order[kept - 1]);
    }

    /**
     * Ids sorted by logit descending, then id ascending, each packed with its sort key into a long (a
     * primitive sort: no boxing of a whole vocabulary per token).
     */
    private static long[] descending(float[] logits, int vocabulary) {
        long[] keys = new long[vocabulary];
        for (int i = 0; i < vocabulary; i++) {
            int bits = Float.floatToIntBits(logits[i]);
            int ascending = bits ^ ((bits >> 31) & 0x7fffffff); // orders as the float does, as a signed int
            keys[i] = ((long) ~ascending << 32) | i;
        }
        Arrays.sort(keys);
        return keys;
    }

    private static int id(long key) {
        return (int) key;
    }

    /** @return the id of the largest of the first {@code vocabulary} logits, the lowest id among equals */
    static int argmax(float[] logits, int vocabulary) {
        int best = 0;
        for (int i = 1; i < vocabulary; i++) {
            if (logits[i] > logits[best]) {
                best = i;
            }
        }
        return best;
    }
}
