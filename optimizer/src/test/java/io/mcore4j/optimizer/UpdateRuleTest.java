package io.mcore4j.optimizer;

import static org.junit.jupiter.api.Assertions.assertEquals;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.Mcore4j;
import io.mcore4j.core.random.DeterministicRandom;

import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/**
 * The tensor update rules against a per-element float64 transcription of torch.optim.Adam,
 * AdamW and SGD (momentum, no dampening), with and without weight decay.
 */
class UpdateRuleTest {
    private static final int N = 13;
    private static final double LR = 0.05;
    private static final double WD = 0.1;

    @ParameterizedTest
    @EnumSource(OptimizerConfig.Algorithm.class)
    void matchesTheTorchFormulasElementByElement(OptimizerConfig.Algorithm algorithm) {
        check(algorithm, false);
    }

    /** The fused kernel (through the shipped TorchScript module) against the same float64 formulas. */
    @ParameterizedTest
    @EnumSource(value = OptimizerConfig.Algorithm.class, names = {"ADAM", "ADAMW"})
    void fusedAdamMatchesTheTorchFormulasElementByElement(OptimizerConfig.Algorithm algorithm) {
        check(algorithm, true);
    }

    /**
     * Two shards updated side by side for five steps: one with weight decay, one with weight decay
     * 0 (a bucket of biases and norm weights), against the per-element float64 formulas.
     */
    private void check(OptimizerConfig.Algorithm algorithm, boolean fused) {
        OptimizerConfig config = OptimizerConfig.builder().algorithm(algorithm).beta1(0.8).beta2(0.95).eps(1e-6)
                .sgdMomentum(0.7).fusedAdam(fused).build();
        DeterministicRandom random = new DeterministicRandom(5);
        double[] decay = {WD, 0};
        float[][] w0 = {random.normal(N, 0, 1), random.normal(N, 0, 1)};
        double[][] w = new double[2][N];
        double[][] m = new double[2][N];
        double[][] v = new double[2][N];
        for (int s = 0; s < 2; s++) {
            for (int i = 0; i < N; i++) {
                w[s][i] = w0[s][i];
            }
        }
        try (NDManager manager = Mcore4j.newRootManager()) {
            UpdateRule rule = UpdateRule.of(config, manager);
            NDArray[] master = new NDArray[2];
            NDArray[][] state = new NDArray[2][rule.stateNames().size()];
            for (int s = 0; s < 2; s++) {
                master[s] = manager.create(w0[s]);
                for (int i = 0; i < state[s].length; i++) {
                    state[s][i] = manager.zeros(new Shape(N), DataType.FLOAT32);
                }
            }
            for (int step = 1; step <= 5; step++) {
                for (int s = 0; s < 2; s++) {
                    float[] g = random.normal(N, 0, 1);
                    try (NDManager temp = manager.newSubManager()) {
                        rule.apply(master[s], temp.create(g), state[s], LR, decay[s], step, temp);
                    }
                    for (int i = 0; i < N; i++) {
                        double wd = decay[s];
                        double gi = g[i];
                        switch (algorithm) {
                            case ADAM, ADAMW -> {
                                if (algorithm == OptimizerConfig.Algorithm.ADAMW) {
                                    w[s][i] *= 1 - LR * wd;
                                } else {
                                    gi += wd * w[s][i];
                                }
                                m[s][i] = 0.8 * m[s][i] + 0.2 * gi;
                                v[s][i] = 0.95 * v[s][i] + 0.05 * gi * gi;
                                double bc1 = 1 - Math.pow(0.8, step);
                                double bc2 = 1 - Math.pow(0.95, step);
                                w[s][i] -= LR / bc1 * m[s][i] / (Math.sqrt(v[s][i]) / Math.sqrt(bc2) + 1e-6);
                            }
                            case SGD -> {
                                gi += wd * w[s][i];
                                m[s][i] = step == 1 ? gi : 0.7 * m[s][i] + gi;
                                w[s][i] -= LR * m[s][i];
                            }
                        }
                    }
                }
            }
            for (int s = 0; s < 2; s++) {
                float[] actual = master[s].toFloatArray();
                for (int i = 0; i < N; i++) {
                    assertEquals(w[s][i], actual[i], 1e-5 * Math.max(1, Math.abs(w[s][i])),
                            algorithm + " shard " + s + " element " + i);
                }
            }
        }
    }
}
