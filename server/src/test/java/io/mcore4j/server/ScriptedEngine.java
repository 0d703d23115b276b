package io.mcore4j.server;

import io.mcore4j.inference.engine.EngineRequest;
import io.mcore4j.inference.engine.GenerationEngine;

import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * A {@link GenerationEngine} whose tokens a test knows in advance: token {@code k} of a request is its prompt's
 * character {@code k mod length}, upper-cased, with log-probability -0.5. One thread steps every running request by
 * one token per step (continuous batching in miniature), waiting {@code stepMillis} between steps; a request's
 * stop ids and budget end it as the contract says. It counts cancelled requests, and can be told to refuse every
 * request as full or closed.
 */
final class ScriptedEngine implements GenerationEngine {
    static final int MAX_SEQUENCE_LENGTH = 64;

    private final int capacity;
    private final long stepMillis;
    private final ConcurrentLinkedQueue<Job> incoming = new ConcurrentLinkedQueue<>();
    private final AtomicInteger pending = new AtomicInteger();
    private final Thread thread;
    final AtomicInteger cancelled = new AtomicInteger();
    final AtomicInteger finished = new AtomicInteger();
    final AtomicInteger tokensStreamed = new AtomicInteger();
    volatile boolean refuseAsFull;
    volatile boolean refuseAsClosed;
    private volatile boolean closed;

    /**
     * @param capacity requests running or waiting at once; more are refused as full
     * @param stepMillis pause between steps
     */
    ScriptedEngine(int capacity, long stepMillis) {
        this.capacity = capacity;
        this.stepMillis = stepMillis;
        this.thread = new Thread(this::loop, "scripted-engine");
        this.thread.setDaemon(true);
        this.thread.start();
    }

    /** The text the script generates for a prompt, {@code n} tokens long. */
    static String expected(String prompt, int n) {
        StringBuilder out = new StringBuilder();
        for (int k = 0; k < n; k++) {
            out.append(Character.toUpperCase(prompt.charAt(k % prompt.length())));
        }
        return out.toString();
    }

    @Override
    public RequestHandle submit(EngineRequest request, TokenStream stream) {
        if (refuseAsClosed || closed) {
            throw new IllegalStateException("the engine is closed");
        }
        if (refuseAsFull || pending.incrementAndGet() > capacity) {
            if (!refuseAsFull) {
                pending.decrementAndGet();
            }
            throw new EngineFullException("the scripted engine holds " + capacity + " requests");
        }
        Job job = new Job(request, stream);
        incoming.add(job);
        return job;
    }

    @Override
    public int maxSequenceLength() {
        return MAX_SEQUENCE_LENGTH;
    }

    @Override
    public int vocabularySize() {
        return CharTokenizer.VOCABULARY;
    }

    @Override
    public int pendingRequests() {
        return pending.get();
    }

    @Override
    public void close() {
        closed = true;
        try {
            thread.join(5000);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    private void loop() {
        List<Job> running = new ArrayList<>();
        while (!closed || !running.isEmpty() || !incoming.isEmpty()) {
            for (Job j; (j = incoming.poll()) != null; ) {
                running.add(j);
            }
            for (Iterator<Job> it = running.iterator(); it.hasNext(); ) {
                Job job = it.next();
                FinishReason end = job.step(closed);
                if (end != null) {
                    if (end == FinishReason.CANCELLED && !closed) {
                        cancelled.incrementAndGet();
                    }
                    finished.incrementAndGet();
                    job.stream.onFinish(end, job.prompt.length, job.generated);
                    pending.decrementAndGet();
                    it.remove();
                }
            }
            try {
                Thread.sleep(stepMillis);
            } catch (InterruptedException e) {
                return;
            }
        }
    }

    private final class Job implements RequestHandle {
        final int[] prompt;
        final EngineRequest request;
        final TokenStream stream;
        volatile boolean cancel;
        int generated;

        Job(EngineRequest request, TokenStream stream) {
            this.request = request;
            this.prompt = request.promptTokens();
            this.stream = stream;
        }

        /** Streams one token, or says why the request ends. */
        FinishReason step(boolean closing) {
            if (cancel || closing) {
                return FinishReason.CANCELLED;
            }
            int token = Character.toUpperCase(prompt[generated % prompt.length]);
            for (int stop : request.stopTokenIds()) {
                if (stop == token) {
                    return FinishReason.STOP;
                }
            }
            generated++;
            tokensStreamed.incrementAndGet();
            stream.onToken(token, request.logprobs() ? -0.5f : Float.NaN);
            return generated == request.maxTokens() ? FinishReason.LENGTH : null;
        }

        @Override
        public void cancel() {
            cancel = true;
        }
    }
}
