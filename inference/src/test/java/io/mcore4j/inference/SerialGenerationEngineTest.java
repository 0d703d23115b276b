package io.mcore4j.inference;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.mcore4j.core.random.SeedScheme;
import io.mcore4j.inference.engine.EngineRequest;
import io.mcore4j.inference.engine.GenerationEngine;
import io.mcore4j.inference.engine.GenerationEngine.FinishReason;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.models.gpt.GptModel;
import io.mcore4j.models.transformer.LayerSpec;
import io.mcore4j.models.transformer.ModelContext;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.junit.jupiter.api.Test;

/**
 * {@link SerialGenerationEngine} on a small random GPT: its streamed tokens are {@link Generator#generate}'s (greedy
 * and seeded sampling), a stop id ends a request unstreamed, a cancel ends it before the next pass, the queue refuses
 * the request beyond its capacity, and closing ends what waits.
 */
class SerialGenerationEngineTest {
    private static final int VOCAB = 64;

    /** What a stream received. */
    private static class Recorder implements GenerationEngine.TokenStream {
        final List<Integer> tokens = new ArrayList<>();
        final List<Float> logprobs = new ArrayList<>();
        final CompletableFuture<FinishReason> finish = new CompletableFuture<>();
        volatile int completionTokens = -1;

        @Override
        public void onToken(int token, float logprob) {
            tokens.add(token);
            logprobs.add(logprob);
        }

        @Override
        public void onFinish(FinishReason reason, int prompt, int completion) {
            completionTokens = completion;
            finish.complete(reason);
        }

        @Override
        public void onError(Throwable error) {
            finish.completeExceptionally(error);
        }

        int[] ids() {
            return tokens.stream().mapToInt(Integer::intValue).toArray();
        }

        FinishReason await() throws Exception {
            return finish.get(30, TimeUnit.SECONDS);
        }
    }

    @Test
    void streamsTheGeneratorsTokensStopsCancelsQueuesAndCloses() {
        InJvmWorld.run(1, rank -> {
            TransformerConfig c = TransformerConfig.builder(2, 32, 4, VOCAB).maxSequenceLength(32).dropout(0, 0).initStd(0.1).build();
            GptModel model = GptModel.build(ModelContext.create(c, rank.groups(ParallelDims.of(1, 1, 1)), rank.manager(),
                    new SeedScheme(3)), LayerSpec.tensorParallel(), new int[] {0, 1}, true, true);
            int[] prompt = {5, 17, 3, 40};
            SamplingParams greedy = SamplingParams.greedy(12);
            SamplingParams sampled = SamplingParams.sample(0.8, 10, 0.9, 12, 77);
            int[] greedyTokens = new Generator(model, VOCAB, -1).generate(List.of(prompt), greedy).get(0).tokens();
            int[] sampledTokens = new Generator(model, VOCAB, -1).generate(List.of(prompt), sampled).get(0).tokens();
            try (SerialGenerationEngine engine = new SerialGenerationEngine(model, VOCAB, -1, 2)) {
                Recorder a = new Recorder();
                engine.submit(new EngineRequest(prompt, greedy, null, false), a);
                assertEquals(FinishReason.LENGTH, a.await());
                assertArrayEquals(greedyTokens, a.ids());
                assertEquals(12, a.completionTokens);
                assertTrue(Float.isNaN(a.logprobs.get(0)), "no log-probabilities unless asked");

                Recorder b = new Recorder();
                engine.submit(new EngineRequest(prompt, sampled, null, true), b);
                b.await();
                assertArrayEquals(sampledTokens, b.ids());
                assertTrue(b.logprobs.stream().allMatch(lp -> lp <= 0 && Float.isFinite(lp)), b.logprobs.toString());

                Recorder stopped = new Recorder();
                engine.submit(new EngineRequest(prompt, greedy, new int[] {greedyTokens[3]}, false), stopped);
                assertEquals(FinishReason.STOP, stopped.await());
                int first = 0;
                while (greedyTokens[first] != greedyTokens[3]) {
                    first++;
                }
                assertEquals(first, stopped.completionTokens, "the stop id ends the request and is not streamed");

                // a stream that cancels its own request after two tokens, and holds the engine's thread until released
                CountDownLatch release = new CountDownLatch(1);
                GenerationEngine.RequestHandle[] self = new GenerationEngine.RequestHandle[1];
                CountDownLatch submitted = new CountDownLatch(1);
                CountDownLatch reached = new CountDownLatch(1);
                Recorder blocking = new Recorder() {
                    @Override
                    public void onToken(int token, float logprob) {
                        super.onToken(token, logprob);
                        if (tokens.size() == 2) {
                            reached.countDown();
                            awaitLatch(submitted);
                            self[0].cancel();
                            awaitLatch(release);
                        }
                    }
                };
                self[0] = engine.submit(new EngineRequest(prompt, greedy, null, false), blocking);
                submitted.countDown();
                Recorder waiting1 = new Recorder();
                Recorder waiting2 = new Recorder();
                awaitLatch(reached);
                engine.submit(new EngineRequest(prompt, greedy, null, false), waiting1);
                engine.submit(new EngineRequest(prompt, greedy, null, false), waiting2);
                GenerationEngine.EngineFullException full = assertThrows(GenerationEngine.EngineFullException.class,
                        () -> engine.submit(new EngineRequest(prompt, greedy, null, false), new Recorder()));
                assertTrue(full.getMessage().contains("2"), full.getMessage());
                assertEquals(3, engine.pendingRequests());
                release.countDown();
                assertEquals(FinishReason.CANCELLED, blocking.await());
                assertEquals(2, blocking.completionTokens, "cancelled before the next pass");
                engine.close();
                for (Recorder w : List.of(waiting1, waiting2)) {
                    FinishReason reason = w.await();
                    assertTrue(reason == FinishReason.CANCELLED || reason == FinishReason.LENGTH, "ended: " + reason);
                }
                assertThrows(IllegalStateException.class, () -> engine.submit(new EngineRequest(prompt, greedy, null, false),
                        new Recorder()));
                assertThrows(IllegalArgumentException.class, () -> new SerialGenerationEngine(model, VOCAB, -1, 0));
            }
            return null;
        });
    }

    private static void awaitLatch(CountDownLatch latch) {
        try {
            latch.await(10, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
