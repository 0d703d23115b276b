package io.mcore4j.moe;

import static io.mcore4j.moe.Fixtures.assertClose;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.random.DeterministicRandom;

import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * {@code --moe-permute-fusion}: {@link FusedTokenPermutation} equals the composed {@link TokenPermutation} on the
 * same routing: the same rows in the same order and counts, and, through a per-row expert function, the same combined
 * output and the same gradients for the tokens and the probabilities (within 1e-6: only the order of the sums
 * differs), with capacity padding (dispatched pairs that are not kept), a token without experts, an expert without
 * tokens, no pairs at all, and float16 expert outputs combined in float32.
 */
class PermuteFusionTest {
    private static final int TOKENS = 10;
    private static final int EXPERTS = 4;
    private static final int HIDDEN = 6;

    @ParameterizedTest(name = "top-{0}, padded={1}, empty={2}, {3}")
    @CsvSource({"2, false, false, FLOAT32", "2, true, false, FLOAT32", "3, true, false, FLOAT16", "1, false, true, FLOAT32"})
    void theFusedPermutationEqualsTheComposedOne(int k, boolean padded, boolean empty, DataType dtype) {
        try (NDManager m = NDManager.newBaseManager(); AutogradScope scope = AutogradScope.open(m)) {
            NDManager s = scope.manager();
            float[] map = new float[TOKENS * EXPERTS];
            float[] kept = new float[TOKENS * EXPERTS];
            for (int t = 0; t < TOKENS && !empty; t++) {
                if (t == 4) {
                    continue; // a token without experts
                }
                for (int j = 0; j < k; j++) {
                    int e = (t * t + j) % (EXPERTS - 1); // expert 3 receives nothing
                    map[t * EXPERTS + e] = 1;
                    kept[t * EXPERTS + e] = padded && (t + j) % 3 == 0 ? 0 : 1;
                }
            }
            NDArray routingMap = s.create(map, new Shape(TOKENS, EXPERTS));
            NDArray keptMap = s.create(kept, new Shape(TOKENS, EXPERTS));
            // probabilities non-zero on dispatched pairs that are not kept too: both must leave those out by the kept map
            Inputs in = Inputs.of(s, routingMap, dtype);
            NDArray[] fused = run(TokenPermutation.of(routingMap, s, true), in, keptMap, k, scope);
            NDArray[] composed = run(TokenPermutation.of(routingMap, s, false), in, keptMap, k, scope);
            assertArrayEquals(TokenPermutation.of(routingMap, s, false).tokensPerExpert(),
                    TokenPermutation.of(routingMap, s, true).tokensPerExpert(), "rows per expert");
            assertEquals(composed[0].getShape(), fused[0].getShape(), "permuted rows");
            if (!empty) {
                assertClose("permuted rows", fused[0], composed[0], 0);
            }
            assertSameResults(fused, composed, dtype);
        }
    }

    /**
     * Dropless routing, every token with k experts: the fused permutation combines by gathers ({@code pair_combine.pt})
     * and still equals the composed one, and its transpose (each token's rows summed, the backward of the dispatch's
     * exchange) equals the index-add's. Expert 3 receives nothing.
     */
    @ParameterizedTest(name = "top-{0}, {1}")
    @CsvSource({"1, FLOAT32", "2, FLOAT32", "3, FLOAT32", "2, FLOAT16", "3, FLOAT64"})
    void everyTokenWithKExpertsCombinesByGathers(int k, DataType dtype) {
        try (NDManager m = NDManager.newBaseManager(); AutogradScope scope = AutogradScope.open(m)) {
            NDManager s = scope.manager();
            float[] map = new float[TOKENS * EXPERTS];
            for (int t = 0; t < TOKENS; t++) {
                for (int j = 0; j < k; j++) {
                    map[t * EXPERTS + (t * t + j) % (EXPERTS - 1)] = 1;
                }
            }
            NDArray routingMap = s.create(map, new Shape(TOKENS, EXPERTS));
            Inputs in = Inputs.of(s, routingMap, dtype);
            TokenPermutation gathering = TokenPermutation.of(routingMap, s, true, null, k);
            NDArray[] fused = run(gathering, in, routingMap, k, scope);
            NDArray[] composed = run(TokenPermutation.of(routingMap, s, false), in, routingMap, k, scope);
            assertClose("permuted rows", fused[0], composed[0], 0);
            assertSameResults(fused, composed, dtype);
            double tolerance = dtype == DataType.FLOAT16 ? 2e-3 : 1e-6;

            FusedTokenPermutation general = (FusedTokenPermutation) TokenPermutation.of(routingMap, s, true);
            general.permute(in.tokens(), s);
            NDArray rows = Fixtures.normal(s, 7, 1.0, TOKENS * k, HIDDEN).toType(dtype, false);
            assertClose("each token's rows summed", ((FusedTokenPermutation) gathering).sumRowsPerToken(rows),
                    general.sumRowsPerToken(rows), tolerance);
        }
    }

    /**
     * A case's tensors: probabilities on the map's pairs, tokens, the per-row expert function's scale, the output's
     * gradient.
     */
    private record Inputs(NDArray probs, NDArray tokens, NDArray scale, NDArray upstream) {
        static Inputs of(NDManager s, NDArray routingMap, DataType dtype) {
            return new Inputs(new DeterministicRandom(3).uniform(s, new Shape(TOKENS, EXPERTS), DataType.FLOAT32)
                    .mul(routingMap), Fixtures.normal(s, 4, 1.0, TOKENS, HIDDEN).toType(dtype, false),
                    Fixtures.normal(s, 5, 1.0, HIDDEN).toType(dtype, false),
                    Fixtures.normal(s, 6, 1.0, TOKENS, HIDDEN).toType(dtype, false));
        }
    }

    /** The combined output and the two gradients agree (only the order of the sums differs), in the rows' dtype. */
    private static void assertSameResults(NDArray[] fused, NDArray[] composed, DataType dtype) {
        assertEquals(dtype, fused[1].getDataType(), "combined output keeps the rows' dtype");
        double tolerance = dtype == DataType.FLOAT16 ? 2e-3 : 1e-6;
        assertClose("combined output", fused[1], composed[1], tolerance);
        assertClose("tokens' gradient", fused[2], composed[2], tolerance);
        assertClose("probabilities' gradient", fused[3], composed[3], 1e-5);
    }

    /** Permute, a per-row expert function ({@code rows * scale}), combine, backward: rows, output, gradients. */
    private static NDArray[] run(TokenPermutation permutation, Inputs in, NDArray keptMap, int k, AutogradScope scope) {
        NDManager s = scope.manager();
        NDArray tokens = Fixtures.leaf(in.tokens(), s);
        NDArray probs = Fixtures.leaf(in.probs(), s);
        NDArray rows = permutation.permute(tokens, s);
        NDArray expertOutput = rows.mul(in.scale());
        expertOutput.attach(s);
        NDArray out = permutation.combine(expertOutput, keptMap, probs, Math.min(k, EXPERTS), scope);
        scope.backward(new NDArray[] {out}, new NDArray[] {in.upstream()});
        return new NDArray[] {rows, out, Fixtures.gradOrZeros(tokens, s), Fixtures.gradOrZeros(probs, s)};
    }
}
