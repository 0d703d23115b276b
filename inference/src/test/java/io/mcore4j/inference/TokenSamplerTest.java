package io.mcore4j.inference;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

/** The Java-side sampler against the distribution it claims to draw from. */
class TokenSamplerTest {
    private static final float[] LOGITS = {0f, 3f, 1f, 2.5f, -1f, 0.5f};

    @Test
    void drawsFromTheSoftmaxAtTheTemperature() {
        for (double temperature : new double[] {1.0, 0.5, 2.0}) {
            double[] p = softmax(LOGITS, temperature, LOGITS.length);
            int[] counts = draw(new SamplingParams(temperature, 0, 0, 1, 11), 40_000, LOGITS.length);
            for (int i = 0; i < p.length; i++) {
                assertEquals(p[i], counts[i] / 40_000.0, 0.01, "id " + i + " at temperature " + temperature);
            }
        }
    }

    @Test
    void topKAndTopPCutTheCandidates() {
        int[] top2 = draw(new SamplingParams(1.0, 2, 0, 1, 3), 5_000, LOGITS.length);
        assertTrue(top2[1] > 0 && top2[3] > 0, "both of the top two are drawn");
        assertEquals(5_000, top2[1] + top2[3], "only the top two are drawn");
        // p(1) = 0.52, p(3) = 0.31 at temperature 1: top-p 0.5 keeps id 1 alone, 0.8 keeps both
        assertEquals(5_000, draw(new SamplingParams(1.0, 0, 0.5, 1, 3), 5_000, LOGITS.length)[1]);
        int[] nucleus = draw(new SamplingParams(1.0, 0, 0.8, 1, 3), 5_000, LOGITS.length);
        assertEquals(5_000, nucleus[1] + nucleus[3]);
        double[] p = softmax(LOGITS, 1.0, LOGITS.length);
        assertEquals(p[1] / (p[1] + p[3]), nucleus[1] / 5_000.0, 0.03, "renormalised over the nucleus");
        // ids past the vocabulary limit (padding rows) are never candidates
        int[] limited = draw(new SamplingParams(1.0, 0, 0, 1, 3), 2_000, 3);
        assertEquals(2_000, limited[0] + limited[1] + limited[2]);
    }

    @Test
    void greedyAndSeedsAreDeterministic() {
        assertEquals(1, new TokenSampler(SamplingParams.greedy(1)).next(LOGITS, LOGITS.length));
        assertEquals(0, TokenSampler.argmax(new float[] {2f, 2f, 1f}, 3), "lowest id among equals");
        assertEquals(1, new TokenSampler(SamplingParams.greedy(1)).next(new float[] {0f, 1f, 9f}, 2), "within the vocabulary limit");
        SamplingParams params = new SamplingParams(1.5, 0, 0.95, 1, 42);
        TokenSampler a = new TokenSampler(params);
        TokenSampler b = new TokenSampler(params);
        for (int k = 0; k < 100; k++) {
            assertEquals(a.next(LOGITS, LOGITS.length), b.next(LOGITS, LOGITS.length), "draw " + k);
        }
    }

    @Test
    void minPPenaltiesAndLogprobsFollowVllmsDefinitions() {
        // p(1) = 0.52, p(3) = 0.31, p(2) = 0.07: min-p 0.5 keeps ids 1 and 3 (0.31 >= 0.26), 0.7 keeps id 1 alone
        int[] minP = draw(new SamplingParams(1.0, 0, 0, 1, 3).withMinP(0.5), 5_000, LOGITS.length);
        assertEquals(5_000, minP[1] + minP[3]);
        assertTrue(minP[3] > 0);
        assertEquals(5_000, draw(new SamplingParams(1.0, 0, 0, 1, 3).withMinP(0.7), 5_000, LOGITS.length)[1]);
        // repetition 2 on a prompt holding id 1: 3 / 2 = 1.5 < 2.5, so greedy takes id 3; a negative logit is multiplied
        float[] row = LOGITS.clone();
        TokenSampler repeated = new TokenSampler(SamplingParams.greedy(4).withPenalties(2, 0, 0), new int[] {1, 4});
        assertEquals(3, repeated.next(row, row.length));
        assertEquals(1.5f, row[1]);
        assertEquals(-2f, row[4]);
        // presence 0.6 + frequency 0.5 per pick: id 1 picked once loses 1.1 (3 -> 1.9 < 2.5), so id 3 follows it
        TokenSampler penalised = new TokenSampler(SamplingParams.greedy(4).withPenalties(1, 0.6, 0.5));
        assertEquals(1, penalised.next(LOGITS.clone(), LOGITS.length));
        assertEquals(3, penalised.next(LOGITS.clone(), LOGITS.length));
        // log-probabilities under the softmax at the temperature, before the cuts
        TokenSampler plain = new TokenSampler(new SamplingParams(2.0, 2, 0, 1, 3));
        float[] same = LOGITS.clone();
        int id = plain.next(same, same.length);
        assertEquals(Math.log(softmax(LOGITS, 2.0, LOGITS.length)[id]), plain.logprob(same, same.length, id), 1e-6);
    }

    private static int[] draw(SamplingParams params, int n, int vocabulary) {
        TokenSampler sampler = new TokenSampler(params);
        int[] counts = new int[LOGITS.length];
        for (int k = 0; k < n; k++) {
            counts[sampler.next(LOGITS, vocabulary)]++;
        }
        return counts;
    }

    private static double[] softmax(float[] logits, double temperature, int n) {
        double[] p = new double[n];
        double sum = 0;
        for (int i = 0; i < n; i++) {
            p[i] = Math.exp(logits[i] / temperature);
            sum += p[i];
        }
        for (int i = 0; i < n; i++) {
            p[i] /= sum;
        }
        return p;
    }
}
