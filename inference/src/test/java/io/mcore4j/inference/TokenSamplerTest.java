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
