package io.mcore4j.inference;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.random.SeedScheme;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.models.gpt.GptModel;
import io.mcore4j.models.transformer.LayerSpec;
import io.mcore4j.models.transformer.ModelContext;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;
import io.mcore4j.tensorparallel.MlpActivation;

import java.util.Arrays;
import java.util.List;
import java.util.function.BiFunction;

import org.junit.jupiter.api.Test;

/**
 * The paged cache against the model's no-cache forward and the contiguous cache ({@link KvCache}, Generator's):
 * two sequences of different lengths in blocks of 4 taken in turn (their blocks interleave in the pools), each
 * prefilled in chunks that cross block boundaries, then decoded together (and one beside a padded row of the null
 * block), at TP1 and TP2: every position's logits within 1e-5 in float32.
 */
class PagedKvCacheTest {
    private static final int VOCAB = 64;
    static final int[] A = {5, 17, 3, 40, 22, 8, 1, 63, 0, 12};
    static final int[] B = {9, 1, 30, 30, 2, 44, 51};

    static TransformerConfig llama() {
        return TransformerConfig.builder(2, 32, 4, VOCAB).maxSequenceLength(24).dropout(0, 0).initStd(0.1)
                .queryGroups(2).positionEmbedding(TransformerConfig.PositionEmbedding.ROPE)
                .activation(MlpActivation.SWIGLU).addBiasLinear(false).tiedEmbeddings(false)
                .normalization(TransformerConfig.Normalization.RMS_NORM, 1e-5).build();
    }

    @Test
    void pagedLogitsEqualTheFullForwardAndTheContiguousCache() {
        // LLaMA (2 query heads per group); Qwen2's QKV biases with half the channels rotating
        for (TransformerConfig c : List.of(llama(), llama().toBuilder().addQkvBias(true).rotary(10000, 0.5).build())) {
            for (int tp : new int[] {1, 2}) {
                double[] diffs = onModel(c, tp, PagedKvCacheTest::pagedVersusReferences).get(0);
                assertTrue(diffs[0] <= 1e-5 && diffs[1] <= 1e-5, "TP" + tp + " " + c + ": paged logits differ from the"
                        + " full forward by " + diffs[0] + ", from the contiguous cache by " + diffs[1]);
            }
        }
    }

    @Test
    void refusesWhatItCannotRun() {
        onModel(llama(), 1, (model, m) -> {
            assertThrows(IllegalArgumentException.class, () -> new PagedKvCache(model, m, 0, 8, 16));
            assertThrows(IllegalArgumentException.class, () -> new PagedKvCache(model, m, 4, 8, 25));
            assertThrows(IllegalArgumentException.class, () -> new PagedKvCache(model, m, 4, 1, 16));
            return null;
        });
        TransformerConfig learned = TransformerConfig.builder(2, 32, 4, VOCAB).maxSequenceLength(24).build();
        IllegalArgumentException e = onModel(learned, 1, (model, m) ->
                assertThrows(IllegalArgumentException.class, () -> new PagedKvCache(model, m, 4, 8, 16))).get(0);
        assertTrue(e.getMessage().contains("LEARNED_ABSOLUTE"), e.getMessage());
        BlockAllocator blocks = new BlockAllocator(4);
        int[] taken = blocks.allocate(3);
        assertEquals(null, blocks.allocate(1));
        blocks.free(taken);
        assertEquals(3, blocks.freeBlocks());
        assertThrows(IllegalArgumentException.class, () -> blocks.free(taken));
    }

    /** {largest difference from the full forward, from the contiguous cache}, over every position of A and B. */
    private static double[] pagedVersusReferences(GptModel model, NDManager m) {
        PagedKvCache cache = new PagedKvCache(model, m, 4, 8, 16);
        BlockAllocator blocks = cache.allocator();
        int[] tableA = new int[3];
        int[] tableB = new int[2];
        for (int k = 0; k < 3; k++) {
            tableA[k] = blocks.allocate(1)[0];
            if (k < 2) {
                tableB[k] = blocks.allocate(1)[0];
            }
        }
        float[][] paged = {new float[A.length * VOCAB], new float[B.length * VOCAB]};
        try (AutogradScope scope = AutogradScope.openNoGrad(m)) {
            // chunked prefills: A 0..3 (one block), B 0..4 (crossing into its second), A 4..6 (crossing)
            pass(scope, cache, paged, new int[][] {{0, 0, 4}}, tableA, tableB);
            pass(scope, cache, paged, new int[][] {{1, 0, 5}}, tableA, tableB);
            pass(scope, cache, paged, new int[][] {{0, 4, 7}}, tableA, tableB);
            // decodes of both (A crosses into its third block), then A beside a padded row
            pass(scope, cache, paged, new int[][] {{0, 7, 8}, {1, 5, 6}}, tableA, tableB);
            pass(scope, cache, paged, new int[][] {{0, 8, 9}, {1, 6, 7}}, tableA, tableB);
            pass(scope, cache, paged, new int[][] {{0, 9, 10}, {-1, 0, 1}}, tableA, tableB);
        }
        blocks.free(tableA);
        blocks.free(tableB);
        assertEquals(blocks.capacity(), blocks.freeBlocks());
        double full = 0;
        double contiguous = 0;
        int i = 0;
        for (int[] prompt : new int[][] {A, B}) {
            full = Math.max(full, maxAbsDiff(paged[i], fullLogits(model, m, prompt)));
            contiguous = Math.max(contiguous, maxAbsDiff(paged[i], contiguousLogits(model, m, prompt)));
            i++;
        }
        return new double[] {full, contiguous};
    }

    /**
     * One pass: rows {sequence (0 = A, 1 = B, -1 = padding), from, to}, all of the same length; writes each real
     * row's logits of positions from..to-1 into {@code out}.
     */
    private static void pass(AutogradScope scope, PagedKvCache cache, float[][] out, int[][] rows, int[] tableA,
                             int[] tableB) {
        int b = rows.length;
        int s = rows[0][2] - rows[0][1];
        long[] tokens = new long[s * b];
        long[] positions = new long[b * s];
        long[] tables = new long[b * 3];
        for (int r = 0; r < b; r++) {
            int seq = rows[r][0];
            int[] prompt = seq == 0 ? A : seq == 1 ? B : null;
            int[] table = seq == 0 ? tableA : seq == 1 ? tableB : new int[0];
            for (int k = 0; k < s; k++) {
                tokens[k * b + r] = prompt == null ? 0 : prompt[rows[r][1] + k];
                positions[r * s + k] = prompt == null ? 0 : rows[r][1] + k;
            }
            for (int k = 0; k < table.length; k++) {
                tables[r * 3 + k] = table[k];
            }
        }
        NDManager m = scope.manager();
        NDArray logits = cache.forward(scope, m.create(tokens, new Shape(s, b)), m.create(positions, new Shape(b, s)),
                m.create(tables, new Shape(b, 3)), false);
        float[] values = logits.toType(DataType.FLOAT32, false).toFloatArray(); // [s, b, V]
        for (int r = 0; r < b; r++) {
            if (rows[r][0] >= 0) {
                for (int k = 0; k < s; k++) {
                    System.arraycopy(values, (k * b + r) * VOCAB, out[rows[r][0]], (rows[r][1] + k) * VOCAB, VOCAB);
                }
            }
        }
    }

    /** The no-cache forward of one sequence, [s, V] flattened. */
    static float[] fullLogits(GptModel model, NDManager m, int[] prompt) {
        try (AutogradScope scope = AutogradScope.openNoGrad(m)) {
            long[] ids = Arrays.stream(prompt).asLongStream().toArray();
            NDArray local = model.forward(scope, scope.manager().create(ids, new Shape(prompt.length, 1)), null, null);
            NDArray full = model.context().groups().tp().size() == 1 ? local
                    : model.context().groups().tp().allGather(local, 2, scope.manager());
            return full.toType(DataType.FLOAT32, false).toFloatArray();
        }
    }

    /** Generator's contiguous cache: a prefill of 3, then one token at a time, [s, V] flattened. */
    private static float[] contiguousLogits(GptModel model, NDManager m, int[] prompt) {
        Generator gen = new Generator(model);
        float[] out = new float[prompt.length * VOCAB];
        try (AutogradScope scope = AutogradScope.openNoGrad(m)) {
            KvCache cache = gen.newCache(scope.manager(), 1, 16);
            for (int from = 0; from < prompt.length; ) {
                int to = from == 0 ? 3 : from + 1;
                NDArray logits = gen.step(scope, cache, new int[][] {Arrays.copyOfRange(prompt, from, to)}, false);
                System.arraycopy(logits.toType(DataType.FLOAT32, false).toFloatArray(), 0, out, from * VOCAB,
                        (to - from) * VOCAB);
                from = to;
            }
        }
        return out;
    }

    static double maxAbsDiff(float[] a, float[] b) {
        assertEquals(a.length, b.length);
        double max = 0;
        for (int i = 0; i < a.length; i++) {
            max = Math.max(max, Math.abs((double) a[i] - b[i]));
        }
        return max;
    }

    /** Builds the model at TP {@code tp} (same seed: same global weights) and runs the task on every rank. */
    static <T> List<T> onModel(TransformerConfig c, int tp, BiFunction<GptModel, NDManager, T> task) {
        return InJvmWorld.run(tp, rank -> {
            ProcessGroups groups = rank.groups(ParallelDims.of(tp, tp, 1));
            int[] layers = new int[c.numLayers()];
            for (int k = 0; k < layers.length; k++) {
                layers[k] = k;
            }
            GptModel model = GptModel.build(ModelContext.create(c, groups, rank.manager(), new SeedScheme(42)),
                    LayerSpec.tensorParallel(), layers, true, true);
            try (NDManager m = model.context().parameters().newSubManager()) {
                return task.apply(model, m);
            }
        });
    }
}
