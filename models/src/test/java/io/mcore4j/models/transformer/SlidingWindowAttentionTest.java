package io.mcore4j.models.transformer;

import static io.mcore4j.core.testing.NativeArrays.assertClose;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.random.DeterministicRandom;
import io.mcore4j.core.random.SeedScheme;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.models.TransformerConfig.SlidingWindow;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.util.List;

import org.junit.jupiter.api.Test;

/**
 * Sliding-window attention (Megatron-Core's {@code window_size} and {@code window_attn_skip_freq}): which layers
 * are windowed; the composed attention's row {@code i} is the causal attention of query {@code i} over the keys
 * {@code i - W .. i} alone; the fused module gives the composed attention's outputs and gradients, with grouped
 * queries; a window that reaches the sequence's start changes nothing.
 */
class SlidingWindowAttentionTest {
    private static final int S = 11;
    private static final int WINDOW = 3;

    @Test
    void windowedLayersFollowMegatronsSkipFrequencyAndPattern() {
        TransformerConfig.Builder b = TransformerConfig.builder(6, 32, 4, 64);
        TransformerConfig every3 = b.slidingWindow(new SlidingWindow(5, 3, List.of())).build();
        // Megatron's 1-based layer_number % 3 == 0 attends globally: layers 2 and 5 counted from 0
        int[] expected = {5, 5, -1, 5, 5, -1};
        for (int n = 0; n < 6; n++) {
            assertEquals(expected[n], every3.windowSize(n), "layer " + n);
        }
        TransformerConfig pattern = b.slidingWindow(new SlidingWindow(5, 0, List.of(true, false, false, true, true, false)))
                .build();
        assertEquals(List.of(5, -1, -1, 5, 5, -1), java.util.stream.IntStream.range(0, 6).map(pattern::windowSize).boxed().toList());
        assertEquals(4, b.slidingWindow(SlidingWindow.everyLayer(4)).build().windowSize(5));
        assertEquals(-1, b.slidingWindow(null).build().windowSize(0));
        IllegalArgumentException wrongLength = assertThrows(IllegalArgumentException.class,
                () -> b.slidingWindow(new SlidingWindow(5, 0, List.of(true, false))).build());
        assertTrue(wrongLength.getMessage().contains("has 2 entries for 6 layers"), wrongLength.getMessage());
        assertThrows(IllegalArgumentException.class, () -> new SlidingWindow(-1, 0, List.of()));
        assertThrows(IllegalArgumentException.class, () -> new SlidingWindow(2, 2, List.of(true)));
    }

    @Test
    void composedRowsAreCausalAttentionOverTheWindowAlone() {
        InJvmWorld.run(1, rank -> {
            NDManager m = rank.manager();
            ModelContext ctx = context(rank, SlidingWindow.everyLayer(WINDOW));
            NDArray[] qkv = inputs(m, DataType.FLOAT32);
            try (AutogradScope scope = AutogradScope.openNoGrad(m)) {
                NDArray windowed = DotProductAttention.forLayer(ctx, 0).forward(scope, qkv[0], qkv[1], qkv[2]);
                DotProductAttention causal = new DotProductAttention(ctx);
                for (int i = 0; i < S; i++) {
                    int from = Math.max(0, i - WINDOW);
                    // the last row of causal attention over positions from..i is query i over exactly those keys
                    NDArray alone = causal.forward(scope, slice(qkv[0], from, i), slice(qkv[1], from, i), slice(qkv[2], from, i));
                    assertClose("row " + i, slice(windowed, i, i), slice(alone, i - from, i - from), 1e-6);
                }
                // the window changes the rows it cuts: rows past the window differ from whole causal attention
                NDArray whole = causal.forward(scope, qkv[0], qkv[1], qkv[2]);
                assertClose("rows within the window", slice(windowed, 0, WINDOW), slice(whole, 0, WINDOW), 1e-6);
                float diff = slice(windowed, WINDOW + 1, S - 1).sub(slice(whole, WINDOW + 1, S - 1)).abs().max().getFloat();
                assertTrue(diff > 1e-3, "the window did not change the later rows: " + diff);
            }
            return null;
        });
    }

    /** float32 to 1e-5, bfloat16 to a few of its ulps; a window past the sequence's start is causal attention. */
    @Test
    void fusedWindowMatchesComposedWindowWithGradients() {
        for (DataType dtype : new DataType[] {DataType.FLOAT32, DataType.BFLOAT16}) {
            double tolerance = dtype == DataType.FLOAT32 ? 1e-5 : 4e-2;
            InJvmWorld.run(1, rank -> {
                NDManager m = rank.manager();
                ModelContext ctx = context(rank, SlidingWindow.everyLayer(WINDOW));
                NDArray[] qkv = inputs(m, dtype);
                NDArray[] composed = outputAndGradients(m, DotProductAttention.forLayer(ctx, 0), qkv);
                NDArray[] fused = outputAndGradients(m, SdpaAttention.forLayer(ctx, 0), qkv);
                String[] names = {"output", "query gradient", "key gradient", "value gradient"};
                for (int j = 0; j < 4; j++) {
                    assertClose(names[j] + " " + dtype, fused[j], composed[j], tolerance);
                }
                ModelContext wide = context(rank, SlidingWindow.everyLayer(S - 1));
                assertClose("a window reaching the start, " + dtype, outputAndGradients(m, SdpaAttention.forLayer(wide, 0), qkv)[0],
                        outputAndGradients(m, new SdpaAttention(wide), qkv)[0], tolerance);
                return null;
            });
        }
    }

    @Test
    void contextParallelRingsRefuseAWindow() {
        Throwable e = assertThrows(InJvmWorld.RankFailedException.class, () -> InJvmWorld.run(2, rank -> {
            ProcessGroups groups = rank.groups(ParallelDims.builder(2).contextParallel(2).build());
            TransformerConfig c = TransformerConfig.builder(1, 64, 8, 128).dropout(0, 0)
                    .slidingWindow(SlidingWindow.everyLayer(4)).build();
            return SdpaAttention.forLayer(ModelContext.create(c, groups, rank.manager(), new SeedScheme(1)), 0);
        })).getCause();
        assertTrue(e.getMessage().contains("needs --cp-comm-type a2a"), e.getMessage());
    }

    private static ModelContext context(InJvmWorld.Rank rank, SlidingWindow window) {
        TransformerConfig config = TransformerConfig.builder(1, 64, 8, 128).queryGroups(2).dropout(0, 0)
                .slidingWindow(window).build();
        return ModelContext.create(config, rank.groups(ParallelDims.of(1, 1, 1)), rank.manager(), new SeedScheme(1));
    }

    /** Queries [S, 2, 8, 8], keys and values [S, 2, 2, 8]. */
    private static NDArray[] inputs(NDManager m, DataType dtype) {
        DeterministicRandom r = new DeterministicRandom(11);
        return new NDArray[] {r.normal(m, new Shape(S, 2, 8, 8), 0, 1, dtype), r.normal(m, new Shape(S, 2, 2, 8), 0, 1, dtype),
            r.normal(m, new Shape(S, 2, 2, 8), 0, 1, dtype)};
    }

    private static NDArray slice(NDArray x, int from, int to) {
        return x.get(from + ":" + (to + 1));
    }

    /** The output and the gradients of q, k, v for a fixed weighting of the output. */
    private static NDArray[] outputAndGradients(NDManager m, CoreAttention attention, NDArray[] qkv) {
        NDArray weights = new DeterministicRandom(5).normal(m, new Shape(S, 2, 64), 0, 1, io.mcore4j.core.DataTypes.of(qkv[0]));
        for (NDArray t : qkv) {
            t.setRequiresGradient(true);
            Tensors.zeroGradient(t);
        }
        try (AutogradScope scope = AutogradScope.open(m)) {
            NDArray out = attention.forward(scope, qkv[0], qkv[1], qkv[2]);
            scope.backward(out.mul(weights).sum());
            NDArray[] result = {out.duplicate(), Tensors.gradientOrZeros(qkv[0], m).duplicate(),
                Tensors.gradientOrZeros(qkv[1], m).duplicate(), Tensors.gradientOrZeros(qkv[2], m).duplicate()};
            for (NDArray a : result) {
                a.attach(m);
            }
            return result;
        }
    }
}
