package io.mcore4j.optimizer;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.Mcore4j;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.random.DeterministicRandom;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.junit.jupiter.params.provider.EnumSource;

/**
 * The tensor update rules against a per-element float64 transcription of torch.optim.Adam,
 * AdamW and SGD (momentum, no dampening), with and without weight decay, one shard per call and
 * many shards in one {@link UpdateRule#applyAll} call.
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
                    reference(algorithm, w[s], m[s], v[s], g, decay[s], step);
                }
            }
            for (int s = 0; s < 2; s++) {
                assertClose(w[s], master[s].toFloatArray(), algorithm + " shard " + s);
            }
        }
    }

    /**
     * Four shards of different lengths, two decaying at different rates and two not, go through
     * one {@link UpdateRule#applyAll} call per step for five steps, given their gradients times 4
     * and the divisor 4. A second copy of the same shards is updated with one
     * {@link UpdateRule#apply} call per shard: weights and state must agree bit for bit, and both
     * must match the float64 formulas.
     */
    @ParameterizedTest
    @CsvSource({"ADAM, true", "ADAMW, true", "ADAM, false", "ADAMW, false", "SGD, false"})
    void oneCallForManyShardsEqualsOneCallPerShard(OptimizerConfig.Algorithm algorithm, boolean fused) {
        OptimizerConfig config = OptimizerConfig.builder().algorithm(algorithm).beta1(0.8).beta2(0.95).eps(1e-6)
                .sgdMomentum(0.7).fusedAdam(fused).build();
        int[] lengths = {N, 1, 40, 7};
        double[] decay = {WD, 0, 0.3, 0};
        int shards = lengths.length;
        DeterministicRandom random = new DeterministicRandom(11);
        double[][] w = new double[shards][];
        double[][] m = new double[shards][];
        double[][] v = new double[shards][];
        try (NDManager manager = Mcore4j.newRootManager()) {
            UpdateRule rule = UpdateRule.of(config, manager);
            int states = rule.stateNames().size();
            NDArray[] batchedMaster = new NDArray[shards];
            NDArray[] singleMaster = new NDArray[shards];
            NDArray[][] batchedState = new NDArray[shards][states];
            NDArray[][] singleState = new NDArray[shards][states];
            for (int s = 0; s < shards; s++) {
                float[] w0 = random.normal(lengths[s], 0, 1);
                w[s] = new double[lengths[s]];
                m[s] = new double[lengths[s]];
                v[s] = new double[lengths[s]];
                for (int i = 0; i < lengths[s]; i++) {
                    w[s][i] = w0[i];
                }
                batchedMaster[s] = manager.create(w0);
                singleMaster[s] = manager.create(w0);
                for (int k = 0; k < states; k++) {
                    batchedState[s][k] = manager.zeros(new Shape(lengths[s]), DataType.FLOAT32);
                    singleState[s][k] = manager.zeros(new Shape(lengths[s]), DataType.FLOAT32);
                }
            }
            for (int step = 1; step <= 5; step++) {
                try (NDManager temp = manager.newSubManager()) {
                    List<UpdateRule.ShardUpdate> updates = new ArrayList<>();
                    for (int s = 0; s < shards; s++) {
                        float[] g = random.normal(lengths[s], 0, 1);
                        // the batched call gets the gradient times 4 and divides it back (exact in float32)
                        NDArray scaled = temp.create(g).mul(4);
                        updates.add(new UpdateRule.ShardUpdate(batchedMaster[s], scaled,
                                Arrays.asList(batchedState[s]), decay[s]));
                        rule.apply(singleMaster[s], temp.create(g), singleState[s], LR, decay[s], step, temp);
                        reference(algorithm, w[s], m[s], v[s], g, decay[s], step);
                    }
                    rule.applyAll(updates, LR, step, 4, temp);
                }
            }
            for (int s = 0; s < shards; s++) {
                String where = algorithm + (fused ? " fused" : "") + " shard " + s;
                assertArrayEquals(singleMaster[s].toFloatArray(), batchedMaster[s].toFloatArray(), where + " weights");
                for (int k = 0; k < states; k++) {
                    assertArrayEquals(singleState[s][k].toFloatArray(), batchedState[s][k].toFloatArray(),
                            where + " " + rule.stateNames().get(k));
                }
                assertClose(w[s], batchedMaster[s].toFloatArray(), where);
            }
        }
    }

    /** An empty list is a no-op; a shard with the wrong number of state tensors is refused before anything moves. */
    @Test
    void applyAllChecksTheStateCount() {
        OptimizerConfig config = OptimizerConfig.builder().algorithm(OptimizerConfig.Algorithm.ADAMW).fusedAdam(true).build();
        try (NDManager manager = Mcore4j.newRootManager(); NDManager temp = manager.newSubManager()) {
            UpdateRule rule = UpdateRule.of(config, manager);
            rule.applyAll(List.of(), LR, 1, 1, temp);
            NDArray master = manager.create(new float[] {1, 2});
            UpdateRule.ShardUpdate wrong = new UpdateRule.ShardUpdate(master, temp.create(new float[] {1, 1}),
                    List.of(manager.zeros(new Shape(2))), WD);
            assertThrows(IllegalArgumentException.class, () -> rule.applyAll(List.of(wrong), LR, 1, 1, temp));
            assertThrows(IllegalArgumentException.class, () -> rule.applyAll(List.of(), LR, 1, 0, temp));
            assertArrayEquals(new float[] {1, 2}, master.toFloatArray());
            assertThrows(IllegalArgumentException.class, () -> new UpdateRule.ShardUpdate(master, master, List.of(), -1));
        }
    }

    /**
     * The decay factor is a device scalar instead of a Java number operand (which costs a
     * host-to-device copy that waits for the stream); the products must be bit for bit those of
     * the number operand.
     */
    @Test
    void decayThroughADeviceScalarEqualsDecayThroughANumber() {
        double lr = 3e-4;
        double wd = 0.1;
        float[] values = new DeterministicRandom(3).normal(1000, 0, 3);
        try (NDManager manager = Mcore4j.newRootManager()) {
            NDArray viaScalar = manager.create(values);
            NDArray viaNumber = manager.create(values);
            UpdateRule.decay(viaScalar, viaScalar, true, lr, wd, manager);
            viaNumber.muli(1 - lr * wd);
            assertArrayEquals(viaNumber.toFloatArray(), viaScalar.toFloatArray(), "decoupled");
            NDArray gradScalar = manager.create(values).flip(0);
            NDArray gradNumber = manager.create(values).flip(0);
            UpdateRule.decay(viaScalar, gradScalar, false, lr, wd, manager);
            gradNumber.addi(viaNumber.mul(wd));
            assertArrayEquals(gradNumber.toFloatArray(), gradScalar.toFloatArray(), "coupled");
            NDArray scaled = manager.create(values);
            scaled.muli(Tensors.scalar(1.0 / 3000, scaled, manager));
            assertArrayEquals(manager.create(values).muli(1.0 / 3000).toFloatArray(), scaled.toFloatArray(), "unscale");
        }
    }

    /** One step of the float64 formulas on one shard, in place on {@code w}, {@code m} and {@code v}. */
    private static void reference(OptimizerConfig.Algorithm algorithm, double[] w, double[] m, double[] v, float[] g,
                                  double wd, int step) {
        for (int i = 0; i < w.length; i++) {
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

    private static void assertClose(double[] expected, float[] actual, String where) {
        assertEquals(expected.length, actual.length, where + " length");
        for (int i = 0; i < expected.length; i++) {
            assertEquals(expected[i], actual[i], 1e-5 * Math.max(1, Math.abs(expected[i])), where + " element " + i);
        }
    }
}
