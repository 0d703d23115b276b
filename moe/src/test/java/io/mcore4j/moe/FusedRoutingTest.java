package io.mcore4j.moe;

import static io.mcore4j.moe.Fixtures.assertClose;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.autograd.AutogradScope;

import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * Routing without expert groups in one call ({@link TopKRouting#selectFused}, which {@link TopKRouting#select(AutogradScope, NDArray, TopKRouting.Options,
 * NDArray, boolean)} runs for
 * logits in a lower precision than float32) equals the composed ops
 * ({@link TopKRouting#selectComposed}) exactly: the same expert indices and routing map, the same probabilities
 * (top-k and scattered, in the logits' dtype), the load-balancing scores and their top-k map, and the gradient
 * of the logits through the probabilities and the scores (within 1e-6: the sigmoid
 * normalisation's backward may round its sums differently), for every score function, top-1 to
 * top-3, with and without the expert bias and the scaling factor, in float32 and bfloat16, on logits with ties.
 */
class FusedRoutingTest {
    private static final int TOKENS = 12;
    private static final int EXPERTS = 6;

    @ParameterizedTest(name = "{0} pre-softmax={1} top-{2} bias={3} scaling {4} {5}")
    @CsvSource({
        "SOFTMAX, false, 2, false, 1, FLOAT32", "SOFTMAX, false, 1, true, 1, FLOAT32", "SOFTMAX, false, 3, true, 2.5, BFLOAT16",
        "SOFTMAX, false, 2, false, 1, BFLOAT16", "SOFTMAX, true, 2, false, 1, FLOAT32", "SOFTMAX, true, 1, true, 2.5, BFLOAT16",
        "SOFTMAX, true, 3, true, 1, FLOAT32", "SIGMOID, false, 2, true, 2.5, FLOAT32", "SIGMOID, false, 1, false, 1, BFLOAT16",
        "SIGMOID, false, 3, false, 1, FLOAT32", "SIGMOID, false, 2, true, 1, BFLOAT16"})
    void theFusedSelectionEqualsTheComposedOne(MoeConfig.RouterScore score, boolean preSoftmax, int k, boolean bias,
                                               double scaling, DataType dtype) {
        TopKRouting.Options options = new TopKRouting.Options(k, score, preSoftmax, 0, 0, scaling);
        try (NDManager m = NDManager.newBaseManager(); AutogradScope scope = AutogradScope.open(m)) {
            NDManager s = scope.manager();
            // rounded to a quarter: many ties within a token, which libtorch's top-k must resolve alike on both paths
            NDArray values = DataTypes.toType(Fixtures.normal(s, 11, 1.0, TOKENS, EXPERTS).mul(4).round().div(4), dtype,
                    false);
            NDArray expertBias = bias ? Fixtures.normal(s, 12, 0.5, EXPERTS) : null;
            NDArray upstream = DataTypes.toType(Fixtures.normal(s, 13, 1.0, TOKENS, EXPERTS), dtype, false);
            NDArray fusedLogits = Fixtures.leaf(values, s);
            NDArray composedLogits = Fixtures.leaf(values, s);
            // the third call: TorchScript's profiling executor runs an optimised graph after its first runs
            TopKRouting.Scored scored = null;
            for (int call = 0; call < 3; call++) {
                scored = TopKRouting.selectFused(scope, fusedLogits, options, expertBias, true);
            }
            TopKRouting.Selection fused = scored.selection();
            TopKRouting.Selection composed = TopKRouting.selectComposed(scope, composedLogits, options, expertBias);
            NDArray auxScores = TopKRouting.scoresForAuxLoss(scope, composedLogits, score);
            NDArray auxMap = TopKRouting.routingMapForAuxLoss(s, auxScores, k);
            NDArray auxUpstream = Fixtures.normal(s, 14, 1.0, TOKENS, EXPERTS);
            scope.backward(new NDArray[] {fused.probs(), composed.probs(), scored.auxScores(), auxScores},
                    new NDArray[] {upstream, upstream, auxUpstream, auxUpstream});

            assertArrayEquals(composed.indices().toLongArray(), fused.indices().toLongArray(), "expert indices");
            assertClose("routing map", fused.routingMap(), composed.routingMap(), 0);
            assertEquals(DataType.FLOAT32, fused.routingMap().getDataType(), "the routing map is float32");
            assertEquals(dtype, DataTypes.of(fused.probs()), "probabilities keep the logits' dtype");
            assertClose("top-k probabilities", fused.topProbs(), composed.topProbs(), 0);
            assertClose("probabilities", fused.probs(), composed.probs(), 0);
            // the sigmoid path's normalisation is differentiated by TorchScript's own formulas inside the call, whose
            // sums may round differently in the last bit
            assertClose("load-balancing scores", scored.auxScores(), auxScores, 0);
            assertClose("load-balancing map", scored.auxMap(), auxMap, 0);
            assertClose("logits' gradient", Fixtures.grad(fusedLogits, s), Fixtures.grad(composedLogits, s), 1e-6);
        }
    }
}
