package io.mcore4j.inference;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import io.mcore4j.core.GraphOptimization;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.inference.engine.EngineRequest;
import io.mcore4j.inference.engine.GenerationEngine;
import io.mcore4j.models.gpt.GptModel;

import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.TimeUnit;

/**
 * The simplest {@link GenerationEngine}: one request at a time, a batch of one, on the engine's own thread, through
 * {@link Generator#step} with a {@link KvCache} sized for the request. Its tokens are those {@link Generator#generate}
 * gives the same prompt and {@link SamplingParams} alone (the same passes, the same {@link TokenSampler}), streamed as
 * they are picked. What serves a model while no continuous-batching engine does, and the reference such an engine's
 * tokens are compared with.
 *
 * <p>Requests wait in a bounded queue, in the order submitted; {@link #submit} throws
 * {@link EngineFullException} when {@code maxQueue} wait already (the running request does not count). A cancelled
 * request still waiting ends when the engine's thread reaches it, without a pass; a running one ends before its next
 * pass, and its cache is freed. Only a model of one rank (TP1, PP1): the engine's thread is the only caller of the
 * model's collectives.
 */
public final class SerialGenerationEngine implements GenerationEngine {
    private final Generator generator;
    private final GptModel model;
    private final int vocabularySize;
    private final int terminationId;
    private final int maxQueue;
    private final BlockingQueue<Job> waiting;
    private final Thread thread;
    private final Object lock = new Object();
    private volatile Job running;
    private volatile boolean closed;

    /**
     * Starts the engine's thread.
     *
     * @param model the whole model on one rank (tensor- and pipeline-parallel size 1)
     * @param vocabularySize ids a token may take: the tokenizer's vocabulary, so that padded rows are never picked
     * @param terminationId the end-of-sequence id that stops every request (not streamed), or -1 for none
     * @param maxQueue how many requests may wait while one runs (at least 1)
     * @throws IllegalArgumentException if the model spans several ranks, or a value is out of range (named)
     */
    public SerialGenerationEngine(GptModel model, int vocabularySize, int terminationId, int maxQueue) {
        int tp = model.context().groups().tp().size();
        int pp = model.context().groups().pp().size();
        if (tp != 1 || pp != 1) {
            throw new IllegalArgumentException("the serial engine runs a model of one rank; this one is TP" + tp + " x PP"
                    + pp + " (expected TP1 x PP1)");
        }
        if (maxQueue < 1) {
            throw new IllegalArgumentException("max queue " + maxQueue + " must be at least 1");
        }
        this.generator = new Generator(model, vocabularySize, terminationId);
        this.model = model;
        this.vocabularySize = vocabularySize;
        this.terminationId = terminationId;
        this.maxQueue = maxQueue;
        this.waiting = new ArrayBlockingQueue<>(maxQueue);
        this.thread = new Thread(this::loop, "serial-generation-engine");
        this.thread.setDaemon(true);
        this.thread.start();
    }

    @Override
    public RequestHandle submit(EngineRequest request, TokenStream stream) {
        request.validate(vocabularySize, maxSequenceLength());
        Job job = new Job(request, stream);
        synchronized (lock) {
            if (closed) {
                throw new IllegalStateException("the engine is closed");
            }
            if (!waiting.offer(job)) {
                throw new EngineFullException("the engine's queue of " + maxQueue + " waiting requests is full");
            }
        }
        return job;
    }

    @Override
    public int maxSequenceLength() {
        return model.context().config().maxSequenceLength();
    }

    @Override
    public int vocabularySize() {
        return vocabularySize;
    }

    @Override
    public int pendingRequests() {
        return waiting.size() + (running != null ? 1 : 0);
    }

    @Override
    public void close() {
        synchronized (lock) {
            if (closed) {
                return;
            }
            closed = true;
        }
        Job current = running;
        if (current != null) {
            current.cancel();
        }
        waiting.forEach(Job::cancel);
        try {
            thread.join();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    private void loop() {
        while (true) {
            Job job;
            try {
                job = waiting.poll(50, TimeUnit.MILLISECONDS);
            } catch (InterruptedException e) {
                return;
            }
            if (job == null) {
                if (closed && waiting.isEmpty()) {
                    return;
                }
                continue;
            }
            if (closed) {
                job.cancel();
            }
            running = job;
            try {
                run(job);
            } catch (RuntimeException | Error e) {
                job.stream.onError(e);
            } finally {
                running = null;
            }
        }
    }

    /** Prefills the prompt, then one pass per token until a stop id, the budget, or a cancel. */
    private void run(Job job) {
        EngineRequest request = job.request;
        int[] prompt = request.promptTokens();
        int[] stops = request.stopTokenIds();
        SamplingParams params = request.sampling();
        if (job.cancelled) {
            job.stream.onFinish(FinishReason.CANCELLED, prompt.length, 0);
            return;
        }
        TokenSampler sampler = new TokenSampler(params, prompt);
        boolean hostRow = request.logprobs() || !params.isPlainGreedy();
        int generated = 0;
        FinishReason reason = FinishReason.LENGTH;
        try (GraphOptimization optimization = GraphOptimization.set(generator.fuses());
             NDManager manager = model.context().parameters().newSubManager()) {
            KvCache cache = generator.newCache(manager, 1, prompt.length + request.maxTokens());
            int[][] input = {prompt};
            while (generated < request.maxTokens()) {
                if (job.cancelled) {
                    reason = FinishReason.CANCELLED;
                    break;
                }
                int next;
                float logprob = Float.NaN;
                try (AutogradScope scope = AutogradScope.openNoGrad(manager)) {
                    NDArray logits = generator.step(scope, cache, input, true);
                    float[][] row = request.logprobs() ? new float[1][] : null;
                    next = generator.pickFromLastPosition(logits, new TokenSampler[] {sampler}, hostRow, row)[0];
                    if (row != null) {
                        logprob = sampler.logprob(row[0], vocabularySize, next);
                    }
                }
                if (next == terminationId || contains(stops, next)) {
                    reason = FinishReason.STOP;
                    break;
                }
                generated++;
                job.stream.onToken(next, logprob);
                input = new int[][] {{next}};
            }
        }
        job.stream.onFinish(reason, prompt.length, generated);
    }

    private static boolean contains(int[] ids, int id) {
        for (int x : ids) {
            if (x == id) {
                return true;
            }
        }
        return false;
    }

    /** A submitted request: its handle, read by the engine's thread. */
    private static final class Job implements RequestHandle {
        final EngineRequest request;
        final TokenStream stream;
        volatile boolean cancelled;

        Job(EngineRequest request, TokenStream stream) {
            this.request = request;
            this.stream = stream;
        }

        @Override
        public void cancel() {
            cancelled = true;
        }
    }
}
