package io.mcore4j.inference;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDArrays;
import ai.djl.ndarray.NDList;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.tensorparallel.MlpActivation;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.random.SeedScheme;
import io.mcore4j.core.testing.NativeArrays;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.models.gpt.GptModel;
import io.mcore4j.models.transformer.LayerSpec;
import io.mcore4j.models.transformer.ModelContext;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.util.ArrayList;
import java.util.List;

import org.junit.jupiter.api.Test;

/**
 * Generation against the model's own no-cache forward and against itself across layouts: cached logits
 * equal the full forward's, greedy and seeded sampling give the same tokens at TP1, TP2 and PP2, a batch
 * of unequal prompts gives what each prompt gives alone, and generation stops at the termination token.
 */
class GeneratorTest {
    private static final int VOCAB = 64;
    private static final int LAYERS = 2;
    private static final List<int[]> PROMPTS = List.of(new int[] {5, 17, 3, 40, 22}, new int[] {9, 1}, new int[] {33, 12, 7, 7});

    private static TransformerConfig gpt() {
        return TransformerConfig.builder(LAYERS, 32, 4, VOCAB).maxSequenceLength(24).dropout(0, 0).initStd(0.1).build();
    }

    private static TransformerConfig llama() {
        return TransformerConfig.builder(LAYERS, 32, 4, VOCAB).maxSequenceLength(24).dropout(0, 0).initStd(0.1)
                .queryGroups(2).positionEmbedding(TransformerConfig.PositionEmbedding.ROPE)
                .activation(MlpActivation.SWIGLU).addBiasLinear(false).tiedEmbeddings(false)
                .normalization(TransformerConfig.Normalization.RMS_NORM, 1e-5).build();
    }

    /**
     * GPT-2's tanh GELU; Qwen2's QKV biases; half the channels rotating, with LLaMA 3.1's frequency scaling; a
     * sliding window of 2 earlier tokens on layer 0 (layer 1 global), which the 10-token sequences outrun.
     */
    private static List<TransformerConfig> variants() {
        return List.of(gpt().toBuilder().activation(MlpActivation.GELU_TANH).build(),
                llama().toBuilder().addQkvBias(true).build(),
                llama().toBuilder().rotary(10000, 0.5).ropeScaling(new TransformerConfig.RopeScaling(8, 1, 4, 8)).build(),
                windowed());
    }

    private static TransformerConfig windowed() {
        return llama().toBuilder().slidingWindow(new TransformerConfig.SlidingWindow(2, 2, List.of())).build();
    }

    @Test
    void cachedLogitsEqualTheFullForward() {
        List<TransformerConfig> configs = new ArrayList<>(List.of(gpt(), llama()));
        configs.addAll(variants());
        for (int c = 0; c < configs.size(); c++) {
            // the op-by-op path (which layers the one-call kernel cannot run take) on the two main shapes and the window
            boolean both = c < 2 || configs.get(c).slidingWindow() != null;
            for (boolean fused : both ? new boolean[] {true, false} : new boolean[] {true}) {
                for (int tp : new int[] {1, 2}) {
                    double diff = cachedVersusFull(configs.get(c), tp, fused);
                    assertTrue(diff <= 1e-5, configs.get(c) + " TP" + tp + (fused ? " fused" : " op by op")
                            + ": cached logits differ by " + diff);
                }
            }
        }
    }

    /**
     * Multi-latent attention with YaRN caches its latent and rotated key (the key up-projection absorbed into the
     * queries, the value up-projection applied to the context): the cached passes give the full forward's logits at TP1
     * and TP2, with and without a query latent.
     */
    @Test
    void latentCacheGivesTheFullForward() {
        for (int qLoraRank : new int[] {16, 0}) {
            TransformerConfig c = llama().toBuilder().queryGroups(4)
                    .multiLatentAttention(new TransformerConfig.MlaDims(qLoraRank, 8, 8, 4, 6))
                    .ropeScaling(TransformerConfig.RopeScaling.yarn(4, 4, 32, 1, 1, 0.8)).build();
            for (int tp : new int[] {1, 2}) {
                double diff = cachedVersusFull(c, tp, false); // op by op: the one-call kernel has no MLA
                assertTrue(diff <= 1e-5, "MLA q_lora_rank " + qLoraRank + " TP" + tp + ": cached logits differ by " + diff);
            }
        }
    }

    /** In float16, as on GPUs: the one-call layers keep the op-by-op path's numerics (float32 norms, casts, biases). */
    @Test
    void float16LayersRunWholeAsTheyRunOpByOp() {
        for (TransformerConfig c : List.of(gpt().toBuilder().dtype(ai.djl.ndarray.types.DataType.FLOAT16).build(),
                llama().toBuilder().dtype(ai.djl.ndarray.types.DataType.FLOAT16).build())) {
            // float16 rounding of the cached passes against the full forward: about 3e-3 either way on this model
            double fused = cachedVersusFull(c, 1, true);
            float[][] narrowedAndFull = cachedAndFull(c, 1, true, false);
            double narrowed = maxAbsDiff(narrowedAndFull[0], narrowedAndFull[1]);
            double opByOp = cachedVersusFull(c, 1, false);
            assertTrue(fused <= 1e-2 && narrowed <= 1e-2 && opByOp <= 1e-2, c.positionEmbedding() + " float16: cached"
                    + " logits differ from the full forward by " + fused + " in one call per layer of static shapes, "
                    + narrowed + " over narrowed caches, " + opByOp + " op by op");
        }
    }

    /** Largest difference between the logits of cached passes (a prefill, a chunk, single tokens) and the full forward. */
    private static double cachedVersusFull(TransformerConfig c, int tp, boolean fusedLayers) {
        float[][] logits = cachedAndFull(c, tp, fusedLayers, true);
        return maxAbsDiff(logits[0], logits[1]);
    }

    /**
     * The logits [s, b, V] of cached passes (a prefill of 4, a chunk of 3 after it, with an explicit mask, then
     * single tokens) and of the full no-cache forward, as float32 values.
     */
    private static float[][] cachedAndFull(TransformerConfig c, int tp, boolean fusedLayers, boolean fuse) {
        return onModel(c, tp, 1, (model, gen) -> {
            gen.fuse(fuse);
            int[][] tokens = {{5, 17, 3, 40, 22, 8, 1, 63, 0, 12}, {9, 1, 30, 30, 2, 44, 51, 6, 19, 27}};
            int s = tokens[0].length;
            NDManager m = model.context().parameters();
            try (AutogradScope scope = AutogradScope.openNoGrad(m)) {
                NDArray ids = scope.manager().create(transpose(tokens), new Shape(s, 2));
                NDArray local = model.forward(scope, ids, null, null);
                NDArray full = model.context().groups().tp().allGather(local, 2, scope.manager());
                KvCache cache = gen.newCache(scope.manager(), 2, 16, fusedLayers);
                List<NDArray> pieces = new ArrayList<>();
                int[] cuts = {0, 4, 7, 8, 9, 10};
                for (int k = 0; k + 1 < cuts.length; k++) {
                    NDArray logits = gen.step(scope, cache, columns(tokens, cuts[k], cuts[k + 1]), false);
                    assertFalse(Tensors.requiresGrad(logits), "generation recorded autograd");
                    pieces.add(logits);
                }
                assertEquals(10, cache.sequenceLengthOffset());
                // the narrowed caches' module has no mask for a window: windowed layers then run op by op
                int windowedLayers = (int) java.util.stream.IntStream.range(0, LAYERS).filter(n -> c.windowSize(n) >= 0).count();
                assertEquals(!fusedLayers ? 0 : fuse ? LAYERS : LAYERS - windowedLayers, cache.layersRunWhole(),
                        "layers run in one call");
                NDArray cached = NDArrays.concat(new NDList(pieces), 0);
                assertEquals(full.getShape(), cached.getShape());
                return new float[][] {asFloats(cached), asFloats(full)};
            }
        }).get(0);
    }

    private static float[] asFloats(NDArray a) {
        return a.toType(ai.djl.ndarray.types.DataType.FLOAT32, false).toFloatArray();
    }

    private static double maxAbsDiff(float[] a, float[] b) {
        assertEquals(a.length, b.length);
        double max = 0;
        for (int i = 0; i < a.length; i++) {
            max = Math.max(max, Math.abs((double) a[i] - b[i]));
        }
        return max;
    }

    /**
     * The static-shape module (whole caches under a mask, cache writes at a position tensor, the pass's rotary
     * rows, run under the graph optimisation) against the module over narrowed caches (without it): the same
     * float32 logits for a prefill, a chunk and single tokens at TP1 and TP2, and the same tokens for a batch of
     * unequal prompts (a prefill to the shortest, then each sequence's next prompt or generated token).
     */
    @Test
    void staticShapesGiveTheNarrowedCachesLogits() {
        for (TransformerConfig c : List.of(gpt(), llama(), variants().get(1), variants().get(2), windowed())) {
            for (int tp : new int[] {1, 2}) {
                float[] fused = cachedAndFull(c, tp, true, true)[0];
                float[] narrowed = cachedAndFull(c, tp, true, false)[0];
                double diff = maxAbsDiff(fused, narrowed);
                assertTrue(diff <= 1e-5, c + " TP" + tp + ": static-shape logits differ from the narrowed caches' by " + diff);
            }
        }
        for (SamplingParams params : List.of(SamplingParams.greedy(8), SamplingParams.sample(1.0, 20, 0.95, 8, 5))) {
            for (int tp : new int[] {1, 2}) {
                List<List<int[]>> modes = new ArrayList<>();
                for (boolean fuse : new boolean[] {true, false}) {
                    modes.add(onModel(llama(), tp, 1, (model, gen) -> {
                        List<int[]> out = new ArrayList<>();
                        for (Completion completion : gen.fuse(fuse).generate(PROMPTS, params)) {
                            out.add(completion.tokens());
                        }
                        return out;
                    }).get(0));
                }
                for (int i = 0; i < PROMPTS.size(); i++) {
                    assertArrayEquals(modes.get(1).get(i), modes.get(0).get(i), "request " + i + " at TP" + tp + " with "
                            + params + ": static shapes and narrowed caches pick different tokens");
                }
            }
        }
    }

    @Test
    void greedyIsTheSameAtEveryLayoutAndStopsAtTheTerminationToken() {
        for (TransformerConfig c : List.of(gpt(), llama())) {
            List<int[]> tp1 = generate(c, 1, 1, SamplingParams.greedy(8));
            List<int[]> tp2 = generate(c, 2, 1, SamplingParams.greedy(8));
            List<int[]> pp2 = generate(c, 1, 2, SamplingParams.greedy(8));
            for (int i = 0; i < PROMPTS.size(); i++) {
                assertEquals(8, tp1.get(i).length);
                assertArrayEquals(tp1.get(i), tp2.get(i), "TP2 request " + i + " with " + c.positionEmbedding());
                assertArrayEquals(tp1.get(i), pp2.get(i), "PP2 request " + i + " with " + c.positionEmbedding());
            }
        }
        // the termination token ends the request before it, and is not part of the completion
        TransformerConfig c = gpt();
        int[] free = generate(c, 1, 1, SamplingParams.greedy(8)).get(0);
        int stop = free[3];
        int first = 0;
        while (free[first] != stop) {
            first++;
        }
        int cut = first;
        List<Completion> stopped = onModel(c, 1, 1, (model, gen) ->
                new Generator(model, VOCAB, stop).generate(List.of(PROMPTS.get(0)), SamplingParams.greedy(8))).get(0);
        assertEquals(Completion.FinishReason.TERMINATION_TOKEN, stopped.get(0).finishReason());
        assertArrayEquals(java.util.Arrays.copyOf(free, cut), stopped.get(0).tokens());
    }

    @Test
    void seededSamplingRepeatsAcrossRunsAndLayouts() {
        TransformerConfig c = llama();
        SamplingParams params = SamplingParams.sample(1.0, 20, 0.95, 10, 1234);
        List<int[]> first = generate(c, 1, 1, params);
        List<int[]> again = generate(c, 1, 1, params);
        List<int[]> tp2 = generate(c, 2, 1, params);
        List<int[]> otherSeed = generate(c, 1, 1, params.withSeed(99));
        boolean anyDifferent = false;
        for (int i = 0; i < PROMPTS.size(); i++) {
            assertArrayEquals(first.get(i), again.get(i), "request " + i + " repeated");
            assertArrayEquals(first.get(i), tp2.get(i), "request " + i + " at TP2");
            anyDifferent |= !java.util.Arrays.equals(first.get(i), otherSeed.get(i));
        }
        assertTrue(anyDifferent, "another seed drew the same tokens for every request: the seed is not used");
        List<int[]> greedy = generate(c, 1, 1, SamplingParams.greedy(10));
        assertNotEquals(java.util.Arrays.toString(greedy.get(0)) + java.util.Arrays.toString(greedy.get(1)),
                java.util.Arrays.toString(first.get(0)) + java.util.Arrays.toString(first.get(1)), "sampling drew the greedy tokens");
    }

    @Test
    void aBatchOfUnequalPromptsEqualsThePromptsRunOneByOne() {
        for (SamplingParams params : List.of(SamplingParams.greedy(6), SamplingParams.sample(0.8, 0, 0.9, 6, 77))) {
            for (int tp : new int[] {1, 2}) {
                List<int[]> batch = generate(llama(), tp, 1, params);
                for (int i = 0; i < PROMPTS.size(); i++) {
                    int[] prompt = PROMPTS.get(i);
                    SamplingParams own = params.withSeed(params.seed() + i);
                    int[] alone = onModel(llama(), tp, 1, (model, gen) ->
                            gen.generate(List.of(prompt), List.of(own)).get(0).tokens()).get(0);
                    assertArrayEquals(alone, batch.get(i), "request " + i + " at TP" + tp + " with " + params);
                }
            }
        }
    }

    @Test
    void generationReleasesEverythingItAllocates() {
        onModel(gpt(), 2, 1, (model, gen) -> {
            NDManager params = model.context().parameters();
            gen.generate(PROMPTS, SamplingParams.greedy(4));
            int baseline = NativeArrays.live(params);
            gen.generate(PROMPTS, SamplingParams.sample(1.0, 5, 0, 4, 1));
            assertEquals(baseline, NativeArrays.live(params), "live arrays grew");
            return null;
        });
    }

    @Test
    void refusesWhatItCannotDo() {
        onModel(gpt(), 1, 1, (model, gen) -> {
            assertThrows(IllegalArgumentException.class, () -> gen.generate(List.of(new int[0]), SamplingParams.greedy(2)));
            assertThrows(IllegalArgumentException.class, () -> gen.generate(List.of(new int[] {VOCAB}), SamplingParams.greedy(2)));
            IllegalArgumentException tooLong = assertThrows(IllegalArgumentException.class,
                    () -> gen.generate(List.of(new int[20]), SamplingParams.greedy(5)));
            assertTrue(tooLong.getMessage().contains("max sequence length 24"), tooLong.getMessage());
            assertThrows(IllegalArgumentException.class, () -> new Generator(model, VOCAB + 1, -1));
            try (AutogradScope scope = AutogradScope.open(model.context().parameters())) {
                KvCache cache = gen.newCache(scope.manager(), 1, 4);
                assertThrows(IllegalArgumentException.class, () -> gen.step(scope, cache, new int[][] {{1}}, true));
            }
            return null;
        });
        assertThrows(IllegalArgumentException.class, () -> new SamplingParams(-1, 0, 0, 1, 0));
        assertThrows(IllegalArgumentException.class, () -> new SamplingParams(1, 0, 1.5, 1, 0));
    }

    private static List<int[]> generate(TransformerConfig c, int tp, int pp, SamplingParams params) {
        List<List<int[]>> perRank = onModel(c, tp, pp, (model, gen) -> {
            List<int[]> out = new ArrayList<>();
            for (Completion completion : gen.generate(PROMPTS, params)) {
                assertEquals(Completion.FinishReason.LENGTH, completion.finishReason());
                out.add(completion.tokens());
            }
            return out;
        });
        for (List<int[]> other : perRank) {
            for (int i = 0; i < PROMPTS.size(); i++) {
                assertArrayEquals(perRank.get(0).get(i), other.get(i), "ranks disagree on request " + i);
            }
        }
        return perRank.get(0);
    }

    private interface ModelTask<T> {
        T run(GptModel model, Generator generator) throws Exception;
    }

    /** Builds the model at TP {@code tp} x PP {@code pp} (same seeds: same global weights) and runs the task on every rank. */
    private static <T> List<T> onModel(TransformerConfig c, int tp, int pp, ModelTask<T> task) {
        return InJvmWorld.run(tp * pp, rank -> {
            ProcessGroups groups = rank.groups(ParallelDims.of(tp * pp, tp, pp));
            int stage = groups.pipelineRank();
            int per = c.numLayers() / pp;
            int[] layers = new int[per];
            for (int k = 0; k < per; k++) {
                layers[k] = stage * per + k;
            }
            GptModel model = GptModel.build(ModelContext.create(c, groups, rank.manager(), new SeedScheme(42)),
                    LayerSpec.tensorParallel(), layers, stage == 0, stage == pp - 1);
            return task.run(model, new Generator(model));
        });
    }

    private static long[] transpose(int[][] tokens) {
        int b = tokens.length;
        int s = tokens[0].length;
        long[] flat = new long[s * b];
        for (int k = 0; k < s; k++) {
            for (int i = 0; i < b; i++) {
                flat[k * b + i] = tokens[i][k];
            }
        }
        return flat;
    }

    private static int[][] columns(int[][] tokens, int from, int to) {
        int[][] out = new int[tokens.length][];
        for (int i = 0; i < tokens.length; i++) {
            out[i] = java.util.Arrays.copyOfRange(tokens[i], from, to);
        }
        return out;
    }

}
