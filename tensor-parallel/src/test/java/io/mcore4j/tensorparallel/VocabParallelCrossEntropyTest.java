package io.mcore4j.tensorparallel;

import static io.mcore4j.tensorparallel.Fixtures.assertClose;
import static io.mcore4j.tensorparallel.Fixtures.chunk;
import static io.mcore4j.tensorparallel.Fixtures.grad;
import static io.mcore4j.tensorparallel.Fixtures.leaf;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.util.List;

import org.junit.jupiter.api.Test;

class VocabParallelCrossEntropyTest {
    static final int TOKENS = 16;
    static final int VOCAB = 32;

    /**
     * Acceptance 5: every rank's logits are 0..7 along its vocabulary shard (the full vocabulary of
     * 32 is four copies of 0..7), targets are 0, 2, ..., 30. The loss of a token is
     * {@code log(4 · Σ_{k<8} e^k) − (t mod 8)} = 8.844634 − (t mod 8): 8.8446, 6.8446, 4.8446, 2.8446 in turn.
     */
    @Test
    void tiledLogitsGiveTheClosedFormLossesAndSoftmaxMinusOneHotGradients() {
        double logSumExp = Math.log(4 * (Math.exp(8) - 1) / (Math.E - 1));
        assertEquals(8.844634, logSumExp, 1e-6);
        double[] cycle = {8.844634, 6.844634, 4.844634, 2.844634};
        InJvmWorld.run(4, ctx -> {
            Communicator tp = ctx.groups(ParallelDims.of(4, 4, 1)).tp();
            int r = tp.rank();
            try (AutogradScope scope = AutogradScope.open(ctx.manager())) {
                NDManager m = scope.manager();
                NDArray shard = m.arange(0f, 8f).reshape(1, 1, 8).repeat(0, TOKENS);
                NDArray logits = leaf(shard, m); // [16, 1, 8]
                NDArray target = m.arange(0, 2 * TOKENS, 2, DataType.INT64).reshape(TOKENS, 1);
                NDArray loss = VocabParallelCrossEntropy.lossPerToken(scope, tp, logits, target, 0.0);
                assertEquals(new Shape(TOKENS, 1), loss.getShape());
                assertEquals(DataType.FLOAT32, loss.getDataType());
                float[] got = loss.toFloatArray();
                for (int i = 0; i < TOKENS; i++) {
                    assertEquals(cycle[i % 4], got[i], 1e-4, "token " + i + " target " + 2 * i);
                }

                // the serial cross-entropy of the gathered [16, 1, 32] logits
                NDArray full = shard.tile(new long[] {1, 1, 4});
                NDArray logp = full.logSoftmax(-1);
                NDArray serial = logp.gather(target.expandDims(-1), -1).squeeze(-1).neg();
                assertClose("rank " + r + " equals the serial cross-entropy", loss, serial, 1e-5);

                scope.backward(new NDArray[] {loss}, new NDArray[] {m.ones(loss.getShape())});
                NDArray expected = full.softmax(-1).sub(target.oneHot(VOCAB).reshape(TOKENS, 1, VOCAB));
                assertClose("rank " + r + " gradient = softmax - onehot", grad(logits, m), chunk(expected, 2, 4, r, m), 1e-4);
            }
            return null;
        });
    }

    /**
     * Acceptance 5 as the issue states it: every rank's logits are [16, 32] (a local vocabulary of
     * 32, the full one 128) holding 0..7 tiled along the vocabulary, targets 0, 2, ..., 30 (all in
     * rank 0's shard). The loss of a token is {@code log(16 · Σ_{k<8} e^k) − (t mod 8)}: 10.2309,
     * 8.2309, 6.2309, 4.2309 in turn, equal to the serial cross-entropy, with gradient softmax − onehot.
     */
    @Test
    void theIssuesConfigurationGivesItsLosses() {
        int localVocab = 32;
        double[] cycle = {10.2309, 8.2309, 6.2309, 4.2309};
        InJvmWorld.run(4, ctx -> {
            Communicator tp = ctx.groups(ParallelDims.of(4, 4, 1)).tp();
            int r = tp.rank();
            try (AutogradScope scope = AutogradScope.open(ctx.manager())) {
                NDManager m = scope.manager();
                NDArray shard = m.arange(0f, 8f).tile(4).reshape(1, 1, localVocab).repeat(0, TOKENS);
                NDArray logits = leaf(shard, m); // [16, 1, 32]
                NDArray target = m.arange(0, 2 * TOKENS, 2, DataType.INT64).reshape(TOKENS, 1);
                NDArray loss = VocabParallelCrossEntropy.lossPerToken(scope, tp, logits, target, 0.0);
                float[] got = loss.toFloatArray();
                for (int i = 0; i < TOKENS; i++) {
                    assertEquals(cycle[i % 4], got[i], 1e-4, "token " + i + " target " + 2 * i);
                }
                NDArray full = shard.tile(new long[] {1, 1, 4}); // [16, 1, 128]
                NDArray serial = full.logSoftmax(-1).gather(target.expandDims(-1), -1).squeeze(-1).neg();
                assertClose("rank " + r + " equals the serial cross-entropy", loss, serial, 1e-5);
                scope.backward(new NDArray[] {loss}, new NDArray[] {m.ones(loss.getShape())});
                NDArray expected = full.softmax(-1).sub(target.oneHot(4 * localVocab).reshape(TOKENS, 1, 4 * localVocab));
                assertClose("rank " + r + " gradient = softmax - onehot", grad(logits, m), chunk(expected, 2, 4, r, m), 1e-4);
            }
            return null;
        });
    }

    /**
     * Label smoothing 0.1 gives the same per-token loss at TP1, TP2 and TP4 for logits that differ
     * across vocabulary shards (so a mean over the local shard would change it), equal to the serial
     * smoothed loss {@code (1 − ε)·nll + ε/(V − 1)·Σ_{k≠t} −log p_k}, with gradients {@code softmax − q}.
     */
    @Test
    void labelSmoothingIsTheSameAtEveryTensorParallelSize() {
        double eps = 0.1;
        List<float[]> perSize = new java.util.ArrayList<>();
        for (int tpSize : new int[] {1, 2, 4}) {
            List<float[]> ranks = InJvmWorld.run(tpSize, ctx -> {
                Communicator tp = ctx.groups(ParallelDims.of(tpSize, tpSize, 1)).tp();
                int r = tp.rank();
                try (AutogradScope scope = AutogradScope.open(ctx.manager())) {
                    NDManager m = scope.manager();
                    NDArray full = Initializers.normal(2.0, 55).create(m, new Shape(TOKENS, 1, VOCAB), DataType.FLOAT32);
                    NDArray target = m.arange(0, TOKENS, 1, DataType.INT64).mul(7).mod(VOCAB).reshape(TOKENS, 1);
                    NDArray logits = leaf(chunk(full, 2, tpSize, r, m), m);
                    NDArray loss = VocabParallelCrossEntropy.lossPerToken(scope, tp, logits, target, eps);

                    NDArray logp = full.logSoftmax(-1);
                    NDArray nll = logp.gather(target.expandDims(-1), -1).squeeze(-1).neg();
                    NDArray others = logp.sum(new int[] {-1}).neg().sub(nll); // Σ_{k≠t} −log p_k
                    NDArray serial = nll.mul(1 - eps).add(others.mul(eps / (VOCAB - 1)));
                    assertClose("TP" + tpSize + " rank " + r + " smoothed loss vs serial", loss, serial, 1e-5);

                    scope.backward(new NDArray[] {loss}, new NDArray[] {m.ones(loss.getShape())});
                    NDArray onehot = target.oneHot(VOCAB).reshape(TOKENS, 1, VOCAB);
                    NDArray q = onehot.mul(1 - eps).add(onehot.neg().add(1).mul(eps / (VOCAB - 1)));
                    NDArray expected = full.softmax(-1).sub(q);
                    assertClose("TP" + tpSize + " rank " + r + " smoothed gradient", grad(logits, m),
                            chunk(expected, 2, tpSize, r, m), 1e-5);
                    return loss.toFloatArray();
                }
            });
            for (float[] rankLoss : ranks) {
                assertArrayEquals(ranks.get(0), rankLoss, "every rank of TP" + tpSize + " agrees bitwise");
            }
            perSize.add(ranks.get(0));
        }
        assertArrayEquals(perSize.get(0), perSize.get(1), 1e-5f, "TP1 vs TP2");
        assertArrayEquals(perSize.get(0), perSize.get(2), 1e-5f, "TP1 vs TP4");
    }

    @Test
    void float16LogitsAreReducedInFloat32AndGetFloat16Gradients() {
        InJvmWorld.run(2, ctx -> {
            Communicator tp = ctx.groups(ParallelDims.of(2, 2, 1)).tp();
            int r = tp.rank();
            try (AutogradScope scope = AutogradScope.open(ctx.manager())) {
                NDManager m = scope.manager();
                NDArray full = Initializers.normal(3.0, 56).create(m, new Shape(4, 2, 8), DataType.FLOAT16);
                NDArray target = m.create(new int[] {0, 7, 3, 4, 5, 1, 2, 6}, new Shape(4, 2));
                NDArray logits = leaf(chunk(full, 2, 2, r, m), m);
                NDArray loss = VocabParallelCrossEntropy.lossPerToken(scope, tp, logits, target, 0.0);
                assertEquals(DataType.FLOAT32, loss.getDataType());
                NDArray full32 = full.toType(DataType.FLOAT32, true);
                NDArray serial = full32.logSoftmax(-1).gather(target.toType(DataType.INT64, false).expandDims(-1), -1)
                        .squeeze(-1).neg();
                assertClose("fp16 loss", loss, serial, 1e-5);
                scope.backward(new NDArray[] {loss}, new NDArray[] {m.ones(loss.getShape())});
                NDArray g = grad(logits, m);
                assertEquals(DataType.FLOAT16, g.getDataType());
                NDArray expected = full32.softmax(-1).sub(target.toType(DataType.INT64, false).oneHot(8).reshape(4, 2, 8));
                assertClose("fp16 gradient", g, chunk(expected, 2, 2, r, m), 1e-3);
            }
            return null;
        });
    }

    /**
     * TP1 and TP2 against the textbook definition over the gathered vocabulary, in float64: target
     * distribution {@code q = (1 − ε)·onehot + ε/(V − 1)·(1 − onehot)}, loss {@code −Σ q·log p},
     * gradient {@code g·(p − q)} for a random upstream gradient {@code g}. Targets fall in both
     * shards (so every rank sees tokens whose target it does not own), and each rank's own-shard
     * target ids include its first and last local ids. Float32 and float16 logits, with and
     * without smoothing; the logits are left unchanged. At TP1 without smoothing this is the fused
     * log-softmax path, otherwise the composed one.
     */
    @Test
    void tp1AndTp2MatchTheTextbookDefinitionWithSmoothingAndTargetsOutsideTheShard() {
        int tokens = 12;
        int vocab = 10;
        long[] ids = {0, 4, 5, 9, 3, 7, 0, 9, 5, 4, 2, 8};
        for (int tpSize : new int[] {1, 2}) {
            for (DataType dtype : new DataType[] {DataType.FLOAT32, DataType.FLOAT16}) {
                for (double eps : new double[] {0.0, 0.2}) {
                    double lossTol = dtype == DataType.FLOAT32 ? 1e-5 : 1e-4;
                    double gradTol = dtype == DataType.FLOAT32 ? 1e-6 : 2e-3;
                    InJvmWorld.run(tpSize, ctx -> {
                        Communicator tp = ctx.groups(ParallelDims.of(tpSize, tpSize, 1)).tp();
                        int r = tp.rank();
                        try (AutogradScope scope = AutogradScope.open(ctx.manager())) {
                            NDManager m = scope.manager();
                            NDArray full = Initializers.normal(2.5, 57).create(m, new Shape(tokens / 2, 2, vocab), dtype);
                            NDArray target = m.create(ids, new Shape(tokens / 2, 2));
                            NDArray logits = leaf(chunk(full, 2, tpSize, r, m), m);
                            NDArray before = logits.duplicate();
                            NDArray upstream = Initializers.normal(1.0, 58).create(m, new Shape(tokens / 2, 2), DataType.FLOAT32);

                            NDArray loss = VocabParallelCrossEntropy.lossPerToken(scope, tp, logits, target, eps);
                            scope.backward(new NDArray[] {loss}, new NDArray[] {upstream});

                            NDArray z = full.toType(DataType.FLOAT64, true);
                            NDArray logp = z.logSoftmax(-1);
                            NDArray onehot = target.oneHot(vocab).reshape(tokens / 2, 2, vocab).toType(DataType.FLOAT64, false);
                            NDArray q = onehot.mul(1 - eps).add(onehot.neg().add(1).mul(eps / (vocab - 1)));
                            NDArray serialLoss = q.mul(logp).sum(new int[] {-1}).neg();
                            NDArray g = upstream.toType(DataType.FLOAT64, true).expandDims(-1);
                            NDArray serialGrad = logp.exp().sub(q).mul(g);

                            String what = "TP" + tpSize + " " + dtype + " eps " + eps + " rank " + r;
                            assertClose(what + " loss", loss, serialLoss, lossTol);
                            NDArray gradient = grad(logits, m);
                            assertEquals(dtype, gradient.getDataType(), what + " gradient dtype");
                            assertClose(what + " gradient", gradient, chunk(serialGrad, 2, tpSize, r, m), gradTol);
                            Fixtures.assertBitwiseEqual(what + " logits untouched", logits, before);
                        }
                        return null;
                    });
                }
            }
        }
    }

    @Test
    void mismatchedShapesAndBadSmoothingAreRefused() {
        InJvmWorld.run(1, ctx -> {
            Communicator tp = ctx.groups(ParallelDims.of(1, 1, 1)).tp();
            try (AutogradScope scope = AutogradScope.open(ctx.manager())) {
                NDManager m = scope.manager();
                NDArray logits = m.zeros(new Shape(4, 2, 8));
                assertThrows(IllegalArgumentException.class, () -> VocabParallelCrossEntropy.lossPerToken(scope, tp, logits,
                        m.zeros(new Shape(4, 3), DataType.INT64), 0));
                assertThrows(IllegalArgumentException.class, () -> VocabParallelCrossEntropy.lossPerToken(scope, tp, logits,
                        m.zeros(new Shape(4, 2), DataType.FLOAT32), 0));
                assertThrows(IllegalArgumentException.class, () -> VocabParallelCrossEntropy.lossPerToken(scope, tp, logits,
                        m.zeros(new Shape(4, 2), DataType.INT64), 1.0));
            }
            return null;
        });
    }
}
