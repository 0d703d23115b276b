package io.mcore4j.inference;

import io.mcore4j.core.random.DeterministicRandom;

import java.util.Arrays;
import java.util.BitSet;
import java.util.HashMap;
import java.util.Map;

/**
 * Picks one request's next token from a row of logits on the Java side, with the request's own seeded
 * generator, so that every rank holding the same logits picks the same token. The order of candidates is
 * fixed (logit descending, then id ascending), so a draw depends only on the logits and the generator's
 * position. It applies the request's penalties ({@link SamplingParams}) from the prompt it was given and the
 * tokens it picked. Not thread-safe: one sampler per request.
 */
public final class TokenSampler {
    private final SamplingParams params;
    private final DeterministicRandom random;
    /** Ids of the prompt (for the repetition penalty), and how often each id was picked; null without penalties. */
    private final BitSet prompt;
    private final Map<Integer, Integer> picked;

    /**
     * A sampler for a request without a prompt to penalise.
     *
     * @param params how to pick
     */
    public TokenSampler(SamplingParams params) {
        this(params, new int[0]);
    }

    /**
     * @param params how to pick
     * @param promptTokens the request's prompt, whose ids the repetition penalty reaches
     */
    public TokenSampler(SamplingParams params, int[] promptTokens) {
        this.params = params;
        this.random = new DeterministicRandom(params.seed());
        this.prompt = params.hasPenalties() ? new BitSet() : null;
        this.picked = params.hasPenalties() ? new HashMap<>() : null;
        if (prompt != null) {
            for (int id : promptTokens) {
                prompt.set(id);
            }
        }
    }

    /**
     * The next token, which the sampler then counts as picked (for the penalties).
     *
     * @param logits the request's logits over the vocabulary (only the first {@code vocabulary} are candidates);
     *     the penalties are applied to them in place, so that {@link #logprob} reads the same row
     * @param vocabulary number of candidate ids
     * @return the chosen id
     */
    public int next(float[] logits, int vocabulary) {
        penalise(logits, vocabulary);
        int id = pick(logits, vocabulary);
        if (picked != null) {
            picked.merge(id, 1, Integer::sum);
        }
        return id;
    }

    /**
     * The log-probability of {@code token} under the softmax at the request's temperature (1 when greedy) of a row
     * {@link #next} has penalised: the distribution before the cuts to top-k, min-p and top-p.
     *
     * @param logits the row {@link #next} was given
     * @param vocabulary number of candidate ids
     * @param token the id
     * @return its log-probability
     */
    public float logprob(float[] logits, int vocabulary, int token) {
        double t = params.temperature() > 0 && !params.isGreedy() ? params.temperature() : 1;
        double max = Double.NEGATIVE_INFINITY;
        for (int i = 0; i < vocabulary; i++) {
            max = Math.max(max, logits[i] / t);
        }
        double sum = 0;
        for (int i = 0; i < vocabulary; i++) {
            sum += Math.exp(logits[i] / t - max);
        }
        return (float) (logits[token] / t - max - Math.log(sum));
    }

    private void penalise(float[] logits, int vocabulary) {
        if (picked == null) {
            return;
        }
        double repetition = params.repetitionPenalty();
        if (repetition != 1) {
            for (int id = prompt.nextSetBit(0); id >= 0 && id < vocabulary; id = prompt.nextSetBit(id + 1)) {
                logits[id] = repeated(logits[id], repetition);
            }
        }
        for (Map.Entry<Integer, Integer> e : picked.entrySet()) {
            int id = e.getKey();
            if (repetition != 1 && !prompt.get(id)) {
                logits[id] = repeated(logits[id], repetition);
            }
            logits[id] -= (float) (params.presencePenalty() + e.getValue() * params.frequencyPenalty());
        }
    }

    private static double sum(double[] weights, int n) {
        double total = 0;
        for (int i = 0; i < n; i++) {
            total += weights[i];
        }
        return total;
    }

    private static float repeated(float logit, double penalty) {
        return (float) (logit > 0 ? logit / penalty : logit * penalty);
    }

    private int pick(float[] logits, int vocabulary) {
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
        if (params.minP() > 0) {
            // weights[0] is the most likely token's: keep those at least min-p times as likely (a prefix, as sorted)
            int cut = 1;
            while (cut < kept && weights[cut] >= params.minP() * weights[0]) {
                cut++;
            }
            kept = cut;
            total = sum(weights, kept);
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
            total = sum(weights, kept);
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
    public static int argmax(float[] logits, int vocabulary) {
        int best = 0;
        for (int i = 1; i < vocabulary; i++) {
            if (logits[i] > logits[best]) {
                best = i;
            }
        }
        return best;
    }
}
