package io.mcore4j.inference.engine;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.random.SeedScheme;
import io.mcore4j.inference.Generator;
import io.mcore4j.inference.SamplingParams;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.models.gpt.GptModel;
import io.mcore4j.models.transformer.LayerSpec;
import io.mcore4j.models.transformer.ModelContext;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;
import io.mcore4j.tensorparallel.MlpActivation;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import org.junit.jupiter.api.Test;

/**
 * The engine against Generator (the contiguous cache) and against itself: greedy tokens equal Generator's; a request's
 * tokens are the same alone and when it joins a running batch mid-flight, greedy and seeded, at TP1 and TP2 (blocks of
 * 4 positions, prompts prefilled in chunks of 3 beside the running decodes); the log-probabilities are the full
 * forward's; prompts of different lengths prefilled in one left-padded pass get the tokens they get alone; stop ids
 * end a request; cancel and close free every block; a full queue refuses. Decode steps replayed
 * from graphs ({@link ReplayingGraphCapture}) at TP1 and TP2 give the eager tokens, every rank capturing each bucket
 * once, and a capture that fails on one rank leaves every rank eager for that bucket.
 */
class ContinuousBatchingEngineTest {
    private static final int VOCAB = 64;
    private static final int[] A = {5, 17, 3, 40, 22};
    private static final int[] B = {9, 1};
    private static final int[] C = {33, 12, 7, 7};

    private static TransformerConfig llama() {
        return TransformerConfig.builder(2, 32, 4, VOCAB).maxSequenceLength(24).dropout(0, 0).initStd(0.1)
                .queryGroups(2).positionEmbedding(TransformerConfig.PositionEmbedding.ROPE)
                .activation(MlpActivation.SWIGLU).addBiasLinear(false).tiedEmbeddings(false)
                .normalization(TransformerConfig.Normalization.RMS_NORM, 1e-5).build();
    }

    private static EngineConfig.Builder small() {
        return EngineConfig.builder().blockSize(4).maxNumSeqs(4).maxNumBatchedTokens(3);
    }

    @Test
    void aRequestGetsTheSameTokensAloneAndJoiningARunningBatch() {
        List<SamplingParams> params = List.of(SamplingParams.greedy(12), SamplingParams.sample(0.9, 20, 0.95, 12, 7)
                .withMinP(0.05).withPenalties(1.2, 0.3, 0.2));
        List<int[]> generator = onModel(1, (model, m) -> {
            List<int[]> out = new ArrayList<>();
            for (int[] p : List.of(A, B, C)) {
                out.add(new Generator(model).generate(List.of(p), List.of(params.get(0))).get(0).tokens());
            }
            return out;
        }).get(0);
        for (int tp : new int[] {1, 2}) {
            for (SamplingParams sp : params) {
                List<int[]> joined = withEngine(tp, small().build(), (engine, model) -> {
                    Collector a = new Collector();
                    CountDownLatch third = new CountDownLatch(3);
                    a.onEach = third::countDown;
                    engine.submit(new EngineRequest(A, sp, null, false), a);
                    await(third);
                    Collector b = new Collector();
                    Collector c = new Collector();
                    engine.submit(new EngineRequest(B, sp.withSeed(sp.seed() + 1), null, false), b);
                    engine.submit(new EngineRequest(C, sp.withSeed(sp.seed() + 2), null, false), c);
                    return List.of(a.tokens(), b.tokens(), c.tokens());
                });
                int k = 0;
                for (int[] p : List.of(A, B, C)) {
                    SamplingParams own = sp.withSeed(sp.seed() + k);
                    int[] alone = alone(p, own);
                    assertEquals(12, alone.length);
                    assertArrayEquals(alone, joined.get(k), "request " + k + " at TP" + tp + " with " + sp + ": joined"
                            + " a running batch");
                    if (sp.isPlainGreedy()) {
                        assertArrayEquals(generator.get(k), alone, "request " + k + ": the engine and Generator");
                    }
                    k++;
                }
            }
        }
    }

    @Test
    void promptsOfDifferentLengthsPrefillInOnePaddedPassWithTheTokensTheyGetAlone() {
        List<SamplingParams> params = List.of(SamplingParams.greedy(10), SamplingParams.sample(0.9, 20, 0.95, 10, 3));
        for (int tp : new int[] {1, 2}) {
            for (SamplingParams sp : params) {
                long[] passes = new long[1];
                List<int[]> together = withEngine(tp, small().maxNumBatchedTokens(16).build(), (engine, model) -> {
                    // the engine's thread waits inside A's first token (its prefill pass) while B and C arrive
                    Gate gate = new Gate();
                    Collector a = new Collector();
                    a.onEach = gate::hold;
                    engine.submit(new EngineRequest(A, sp, null, false), a);
                    gate.awaitHeld();
                    Collector b = new Collector();
                    Collector c = new Collector();
                    engine.submit(new EngineRequest(B, sp.withSeed(sp.seed() + 1), null, false), b);
                    engine.submit(new EngineRequest(C, sp.withSeed(sp.seed() + 2), null, false), c);
                    a.onEach = () -> { };
                    gate.open();
                    List<int[]> out = List.of(a.tokens(), b.tokens(), c.tokens());
                    passes[0] = engine.prefillPasses();
                    return out;
                });
                // A alone; then B (2 tokens, left-padded to 4) and C (4) in one pass of [4, 2] beside A's decodes
                assertEquals(2, passes[0], "prefill passes at TP" + tp);
                int k = 0;
                for (int[] p : List.of(A, B, C)) {
                    SamplingParams own = sp.withSeed(sp.seed() + k);
                    int[] alone = alone(p, own);
                    assertArrayEquals(alone, together.get(k), "request " + k + " at TP" + tp + " with " + sp
                            + ": prefilled in a padded pass");
                    k++;
                }
            }
        }
    }

    @Test
    void decodeStepsReplayedFromGraphsAtTp2GiveTheEagerTokensAndEveryRankCapturesEachBucketOnce() {
        List<int[]> eager = graphScenario(1);
        assertTokensEqual(eager, graphScenario(2), "TP2 eager against TP1 eager");
        try {
            ReplayingGraphCapture.enabled = true;
            for (int tp : new int[] {1, 2}) {
                ReplayingGraphCapture.CAPTURES.clear();
                ReplayingGraphCapture.REPLAYS.clear();
                assertTokensEqual(eager, graphScenario(tp), "TP" + tp + " from graphs against TP1 eager");
                for (int r = 0; r < tp; r++) {
                    String rank = "mcore4j-engine-tp" + r;
                    // buckets 1 and 4 each run 11 decode steps: 3 eager, a capture, 8 replays
                    assertEquals(2, count(ReplayingGraphCapture.CAPTURES, rank), "TP" + tp + " rank " + r + "'s captures");
                    assertEquals(16, count(ReplayingGraphCapture.REPLAYS, rank), "TP" + tp + " rank " + r + "'s replays");
                }
            }
            // one rank's capture of bucket 1 fails: both ranks run bucket 1 eagerly (none waits in a collective the
            // other does not run), then both capture and replay bucket 4
            ReplayingGraphCapture.CAPTURES.clear();
            ReplayingGraphCapture.REPLAYS.clear();
            ReplayingGraphCapture.REFUSALS.set(1);
            assertTokensEqual(eager, graphScenario(2), "TP2 after one rank's capture failed against TP1 eager");
            assertEquals(0, ReplayingGraphCapture.REFUSALS.get(), "the refusal was used");
            for (int r = 0; r < 2; r++) {
                String rank = "mcore4j-engine-tp" + r;
                assertEquals(2, count(ReplayingGraphCapture.CAPTURES, rank), "rank " + r + "'s captures (one refused)");
                assertEquals(8, count(ReplayingGraphCapture.REPLAYS, rank), "rank " + r + ": bucket 4's replays only");
            }
        } finally {
            ReplayingGraphCapture.reset();
        }
    }

    /**
     * Request A alone (decode bucket 1), then A, B and C admitted together behind a one-token request that holds the
     * engine's thread until they wait (bucket 4), 12 greedy tokens each, every prompt prefilled in one chunk: each
     * bucket runs 11 decode steps. The four token lists.
     */
    private static List<int[]> graphScenario(int tp) {
        return withEngine(tp, small().maxNumBatchedTokens(16).build(), (engine, model) -> {
            List<int[]> out = new ArrayList<>();
            Collector alone = new Collector();
            engine.submit(new EngineRequest(A, SamplingParams.greedy(12), null, false), alone);
            out.add(alone.tokens());
            Gate gate = new Gate();
            Collector held = new Collector();
            held.onEach = gate::hold;
            engine.submit(new EngineRequest(B, SamplingParams.greedy(1), null, false), held);
            gate.awaitHeld();
            List<Collector> together = new ArrayList<>();
            for (int[] p : List.of(A, B, C)) {
                Collector x = new Collector();
                together.add(x);
                engine.submit(new EngineRequest(p, SamplingParams.greedy(12), null, false), x);
            }
            gate.open();
            for (Collector x : together) {
                out.add(x.tokens());
            }
            return out;
        });
    }

    private static void assertTokensEqual(List<int[]> expected, List<int[]> actual, String what) {
        assertEquals(expected.size(), actual.size(), what);
        for (int k = 0; k < expected.size(); k++) {
            assertEquals(12, actual.get(k).length, what + ": request " + k + "'s length");
            assertArrayEquals(expected.get(k), actual.get(k), what + ": request " + k);
        }
    }

    private static int count(Map<String, AtomicInteger> counts, String thread) {
        var c = counts.get(thread);
        return c == null ? 0 : c.get();
    }

    @Test
    void logprobsAreTheFullForwardsAndStopIdsEndARequest() {
        int[] greedy = withEngine(1, small().build(), (engine, model) -> {
            Collector x = new Collector();
            engine.submit(new EngineRequest(A, SamplingParams.greedy(6), null, true), x);
            int[] tokens = x.tokens();
            for (float lp : x.logprobs) {
                assertTrue(lp <= 0 && Float.isFinite(lp), "log-probability " + lp);
            }
            float[] expected = fullForwardLogprobs(model, tokens);
            for (int k = 0; k < tokens.length; k++) {
                assertEquals(expected[k], x.logprobs.get(k), 1e-4, "token " + k + "'s log-probability");
            }
            return tokens;
        });
        int stop = greedy[3];
        int first = 0;
        while (greedy[first] != stop) {
            first++;
        }
        int cut = first;
        withEngine(1, small().terminationId(-1).build(), (engine, model) -> {
            Collector x = new Collector();
            engine.submit(new EngineRequest(A, SamplingParams.greedy(6), new int[] {63, stop}, false), x);
            assertArrayEquals(Arrays.copyOf(greedy, cut), x.tokens());
            assertEquals(GenerationEngine.FinishReason.STOP, x.reason());
            return null;
        });
    }

    @Test
    void cancelFreesBlocksAFullQueueRefusesAndCloseCancelsEverything() {
        withEngine(1, small().maxNumSeqs(1).maxWaitingRequests(1).build(), (engine, model) -> {
            int capacity = engine.allocator().capacity();
            // the engine's thread waits inside the first token's callback: nothing is admitted meanwhile
            Gate gate = new Gate();
            Collector a = new Collector();
            a.onEach = gate::hold;
            GenerationEngine.RequestHandle ha = engine.submit(new EngineRequest(A, SamplingParams.greedy(15), null, false), a);
            gate.awaitHeld();
            Collector b = new Collector();
            engine.submit(new EngineRequest(B, SamplingParams.greedy(4), null, false), b);
            assertThrows(GenerationEngine.EngineFullException.class,
                    () -> engine.submit(new EngineRequest(C, SamplingParams.greedy(4), null, false), new Collector()));
            assertEquals(2, engine.pendingRequests());
            ha.cancel();
            a.onEach = () -> { };
            gate.open();
            assertEquals(GenerationEngine.FinishReason.CANCELLED, a.reason());
            assertEquals(GenerationEngine.FinishReason.LENGTH, b.reason());
            assertEquals(4, b.tokens().length);
            assertEquals(capacity, engine.allocator().freeBlocks(), "blocks back after cancel and finish");
            assertThrows(IllegalArgumentException.class, () -> engine.submit(new EngineRequest(new int[] {VOCAB},
                    SamplingParams.greedy(1), null, false), new Collector()));
            assertThrows(IllegalArgumentException.class, () -> engine.submit(new EngineRequest(A,
                    SamplingParams.greedy(20), null, false), new Collector()));
            return null;
        });
        withEngine(1, small().build(), (engine, model) -> {
            CountDownLatch release = new CountDownLatch(1);
            List<Collector> all = new ArrayList<>();
            for (int[] p : List.of(A, B, C, A, B, C)) {
                Collector x = new Collector();
                x.onEach = () -> await(release);
                all.add(x);
                engine.submit(new EngineRequest(p, SamplingParams.greedy(15), null, false), x);
            }
            CompletableFuture<Void> closed = CompletableFuture.runAsync(engine::close);
            release.countDown();
            closed.join();
            for (Collector x : all) {
                assertEquals(GenerationEngine.FinishReason.CANCELLED, x.reason());
            }
            assertEquals(0, engine.pendingRequests());
            assertThrows(IllegalStateException.class, () -> engine.submit(new EngineRequest(A, SamplingParams.greedy(1),
                    null, false), new Collector()));
            return null;
        });
    }

    /**
     * A request's tokens from an engine of its own at TP1. Greedy, its first token comes from the prefill, then each
     * decode step but the first and the last (max tokens reached) is queued before the last one's picks are read.
     */
    private static int[] alone(int[] prompt, SamplingParams params) {
        return withEngine(1, small().build(), (engine, model) -> {
            Collector x = new Collector();
            engine.submit(new EngineRequest(prompt, params, null, false), x);
            int[] tokens = x.tokens();
            int n = params.numTokensToGenerate();
            assertEquals(params.isPlainGreedy() ? n - 2 : 0, engine.advancedSteps(), "steps queued ahead");
            return tokens;
        });
    }

    /** The log-softmax of the full no-cache forward at each generated token, from the engine's model. */
    private static float[] fullForwardLogprobs(GptModel model, int[] tokens) {
        int[] all = new int[A.length + tokens.length - 1];
        System.arraycopy(A, 0, all, 0, A.length);
        System.arraycopy(tokens, 0, all, A.length, tokens.length - 1);
        float[] logits;
        try (AutogradScope scope = AutogradScope.openNoGrad(model.context().parameters())) {
            long[] ids = Arrays.stream(all).asLongStream().toArray();
            logits = model.forward(scope, scope.manager().create(ids, new Shape(all.length, 1)), null, null)
                    .toType(DataType.FLOAT32, false).toFloatArray();
        }
        float[] out = new float[tokens.length];
        for (int k = 0; k < tokens.length; k++) {
            int row = (A.length - 1 + k) * VOCAB;
            double max = Double.NEGATIVE_INFINITY;
            for (int v = 0; v < VOCAB; v++) {
                max = Math.max(max, logits[row + v]);
            }
            double sum = 0;
            for (int v = 0; v < VOCAB; v++) {
                sum += Math.exp(logits[row + v] - max);
            }
            out[k] = (float) (logits[row + tokens[k]] - max - Math.log(sum));
        }
        return out;
    }

    private static void await(CountDownLatch latch) {
        try {
            assertTrue(latch.await(60, TimeUnit.SECONDS), "timed out");
        } catch (InterruptedException e) {
            throw new IllegalStateException(e);
        }
    }

    /** Holds the engine's thread inside a stream callback ({@link #hold}) until the test {@link #open opens} it. */
    private static final class Gate {
        private final CountDownLatch held = new CountDownLatch(1);
        private final CountDownLatch opened = new CountDownLatch(1);

        void hold() {
            held.countDown();
            await(opened);
        }

        void awaitHeld() {
            await(held);
        }

        void open() {
            opened.countDown();
        }
    }

    /** Collects one request's stream. */
    static final class Collector implements GenerationEngine.TokenStream {
        final List<Integer> ids = new ArrayList<>();
        final List<Float> logprobs = new ArrayList<>();
        final CompletableFuture<GenerationEngine.FinishReason> end = new CompletableFuture<>();
        volatile Runnable onEach = () -> { };

        @Override
        public void onToken(int token, float logprob) {
            ids.add(token);
            logprobs.add(logprob);
            onEach.run();
        }

        @Override
        public void onFinish(GenerationEngine.FinishReason reason, int promptTokens, int completionTokens) {
            assertEquals(ids.size(), completionTokens);
            end.complete(reason);
        }

        @Override
        public void onError(Throwable error) {
            end.completeExceptionally(error);
        }

        GenerationEngine.FinishReason reason() {
            try {
                return end.get(60, TimeUnit.SECONDS);
            } catch (Exception e) {
                throw new IllegalStateException(e);
            }
        }

        int[] tokens() {
            reason();
            return ids.stream().mapToInt(Integer::intValue).toArray();
        }
    }

    private interface EngineTask<T> {
        T run(ContinuousBatchingEngine engine, GptModel model);
    }

    /** Starts an engine on every rank of a TP {@code tp} model (same seeds: same weights); rank 0's task result. */
    private static <T> T withEngine(int tp, EngineConfig config, EngineTask<T> task) {
        return onModel(tp, (model, m) -> {
            ContinuousBatchingEngine engine = ContinuousBatchingEngine.start(model, config);
            try {
                return engine.isLeader() ? task.run(engine, model) : null;
            } finally {
                engine.close();
            }
        }).get(0);
    }

    private static <T> List<T> onModel(int tp, java.util.function.BiFunction<GptModel, NDManager, T> task) {
        TransformerConfig c = llama();
        return InJvmWorld.run(tp, rank -> {
            ProcessGroups groups = rank.groups(ParallelDims.of(tp, tp, 1));
            GptModel model = GptModel.build(ModelContext.create(c, groups, rank.manager(), new SeedScheme(42)),
                    LayerSpec.tensorParallel(), new int[] {0, 1}, true, true);
            return task.apply(model, rank.manager());
        });
    }
}
