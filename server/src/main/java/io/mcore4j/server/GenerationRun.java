package io.mcore4j.server;

import io.mcore4j.inference.engine.GenerationEngine;
import io.mcore4j.inference.engine.GenerationEngine.FinishReason;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;

/**
 * One request in the engine, seen from the request's thread: the engine's callbacks only put events on a queue (they
 * never wait for the client), and {@link #next()} turns them into pieces of text, detokenized incrementally and cut
 * at the first stop string, at which the engine's request is cancelled.
 */
final class GenerationRun implements GenerationEngine.TokenStream {
    /**
     * Text ready to send.
     *
     * @param text the new text (may be empty)
     * @param tokens the tokens this text completes (a token whose text is still incomplete waits for a later piece)
     * @param logprobs their log-probabilities (NaN when not asked for)
     * @param finishReason null while generation goes on; else OpenAI's {@code stop} or {@code length}
     */
    record Piece(String text, int[] tokens, float[] logprobs, String finishReason) {}

    private record Token(int id, float logprob) {}

    private record Finish(FinishReason reason) {}

    private final BlockingQueue<Object> events = new LinkedBlockingQueue<>();
    private final int promptTokens;
    private final IncrementalDetokenizer detokenizer;
    private final StopStrings stops;
    private final List<Token> unsent = new ArrayList<>();
    private volatile GenerationEngine.RequestHandle handle;
    private int completionTokens;
    private boolean ended;

    private GenerationRun(ServingTokenizer tokenizer, int[] prompt, List<String> stops) {
        this.promptTokens = prompt.length;
        this.detokenizer = new IncrementalDetokenizer(tokenizer, prompt);
        this.stops = new StopStrings(stops);
    }

    /**
     * Submits a request.
     *
     * @param model the served model
     * @param prompt the prompt's ids
     * @param params how tokens are picked and where they stop
     * @return the running request
     * @throws OpenAiError 429 when the engine's queue is full, 503 when the engine is closed, 400 when the engine
     *     refuses the request or a parameter it cannot carry
     */
    static GenerationRun submit(ServedModel model, int[] prompt, GenerationParams params) {
        GenerationRun run = new GenerationRun(model.tokenizer(), prompt, params.stop());
        try {
            run.handle = model.engine().submit(params.toEngineRequest(prompt), run);
        } catch (GenerationEngine.EngineFullException e) {
            throw new OpenAiError(429, "rate_limit_error", null, "rate_limit_exceeded",
                    "the server is busy: " + e.getMessage() + "; retry later");
        } catch (IllegalStateException e) {
            throw new OpenAiError(503, "service_unavailable", null, null, "the server is shutting down: " + e.getMessage());
        } catch (IllegalArgumentException e) {
            throw OpenAiError.badRequest(null, e.getMessage());
        }
        return run;
    }

    /**
     * Waits for the next piece of text.
     *
     * @return the piece; the last one has a finish reason
     * @throws InterruptedException if the request's thread is interrupted
     * @throws OpenAiError 503 if the engine ended the request itself (it was closed), 500 if the engine failed
     * @throws IllegalStateException if called after the last piece
     */
    Piece next() throws InterruptedException {
        if (ended) {
            throw new IllegalStateException("the request has ended");
        }
        while (true) {
            Object event = events.take();
            if (event instanceof Token token) {
                completionTokens++;
                unsent.add(token);
                String text = stops.offer(detokenizer.next(token.id()));
                if (stops.stopped()) {
                    cancel();
                    return last(text, "stop");
                }
                if (!text.isEmpty()) {
                    return piece(text, null);
                }
            } else if (event instanceof Finish finish) {
                if (finish.reason() == FinishReason.CANCELLED) {
                    ended = true;
                    throw new OpenAiError(503, "service_unavailable", null, null,
                            "the engine ended the request: the server is shutting down");
                }
                String tail = stops.offer(detokenizer.flush());
                if (stops.stopped()) {
                    return last(tail, "stop");
                }
                return last(tail + stops.flush(), finish.reason() == FinishReason.STOP ? "stop" : "length");
            } else {
                ended = true;
                Throwable error = (Throwable) event;
                throw new OpenAiError(500, "server_error", null, null, "generation failed: " + error);
            }
        }
    }

    private Piece last(String text, String reason) {
        ended = true;
        return piece(text, reason);
    }

    private Piece piece(String text, String reason) {
        int[] ids = new int[unsent.size()];
        float[] logprobs = new float[ids.length];
        for (int k = 0; k < ids.length; k++) {
            ids[k] = unsent.get(k).id();
            logprobs[k] = unsent.get(k).logprob();
        }
        unsent.clear();
        return new Piece(text, ids, logprobs, reason);
    }

    /** Cancels the engine's request (the client left, or a stop string was found); idempotent. */
    void cancel() {
        GenerationEngine.RequestHandle h = handle;
        if (h != null) {
            h.cancel();
        }
    }

    /** @return the prompt's length */
    int promptTokens() {
        return promptTokens;
    }

    /** @return tokens generated so far (those after a stop string not counted) */
    int completionTokens() {
        return completionTokens;
    }

    @Override
    public void onToken(int token, float logprob) {
        events.add(new Token(token, logprob));
    }

    @Override
    public void onFinish(FinishReason reason, int prompt, int completion) {
        events.add(new Finish(reason));
    }

    @Override
    public void onError(Throwable error) {
        events.add(error);
    }
}
