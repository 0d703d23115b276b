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
 * AdamW and SGD (momentum, no dampening), with a mask that exempts some elements from decay.
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

    private void check(OptimizerConfig.Algorithm algorithm, boolean fused) {
        OptimizerConfig config = OptimizerConfig.builder().algorithm(algorithm).beta1(0.8).beta2(0.95).eps(1e-6)
                .sgdMomentum(0.7).fusedAdam(fused).build();
        DeterministicRandom random = new DeterministicRandom(5);
        float[] w0 = random.normal(N, 0, 1);
        boolean[] decays = new boolean[N];
        for (int i = 0; i < N; i++) {
            decays[i] = i % 3 != 0;
        }
        double[] w = new double[N];
        double[] m = new double[N];
        double[] v = new double[N];
        for (int i = 0; i < N; i++) {
            w[i] = w0[i];
        }
        try (NDManager manager = Mcore4j.newRootManager()) {
            UpdateRule rule = UpdateRule.of(config, manager);
            NDArray master = manager.create(w0);
            NDArray[] state = new NDArray[rule.stateNames().size()];
            for (int i = 0; i < state.length; i++) {
                state[i] = manager.zeros(new Shape(N), DataType.FLOAT32);
            }
            NDArray mask = manager.create(decays);
            for (int step = 1; step <= 5; step++) {
                float[] g = random.normal(N, 0, 1);
                try (NDManager temp = manager.newSubManager()) {
                    rule.apply(master, temp.create(g), state, mask, LR, WD, step, temp);
                }
                for (int i = 0; i < N; i++) {
                    double wd = decays[i] ? WD : 0;
                    double gi = g[i];
                    switch (algorithm) {
                        case ADAM, ADAMW -> {
                            if (algorithm == OptimizerConfig.Algorithm.ADAMW) {
                                w[i] *= 1 - LR * wd;
                            } else {
                                gi += wd * w[i];
                            }
                            m[i] = 0.8 * m[i] + 0.2 * gi;
                            v[i] = 0.95 * v[i] + 0.05 * gi * gi;
                            double bc1 = 1 - Math.pow(0.8, step);
                            double bc2 = 1 - Math.pow(0.95, step);
                            w[i] -= LR / bc1 * m[i] / (Math.sqrt(v[i]) / Math.sqrt(bc2) + 1e-6);
                        }
                        case SGD -> {
                            gi += wd * w[i];
                            m[i] = step == 1 ? gi : 0.7 * m[i] + gi;
                            w[i] -= LR * m[i];
                        }
                    }
                }
            }
            float[] actual = master.toFloatArray();
            for (int i = 0; i < N; i++) {
                assertEquals(w[i], actual[i], 1e-5 * Math.max(1, Math.abs(w[i])), algorithm + " element " + i);
            }
        }
    }
}
