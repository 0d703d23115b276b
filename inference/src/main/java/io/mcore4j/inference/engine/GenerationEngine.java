package io.mcore4j.inference.engine;

/**
 * Generation as a service: requests are submitted at any time from any thread, join the running batch
 * between decode steps, and stream their tokens back as they are picked (continuous batching). What a
 * server, a command line or a Java caller drives; the engine owns the model, its key/value cache and the
 * thread that steps it.
 *
 * <p>Token ids in, token ids out: text, chat templates and stop strings belong to the caller, which
 * {@link RequestHandle#cancel() cancels} a request once its text reaches a stop string.
 *
 * <p>Every {@link TokenStream} callback of one request runs on the engine's thread, in order, and ends
 * with exactly one {@link TokenStream#onFinish} or {@link TokenStream#onError}; a callback must return
 * quickly (hand the token to a queue or a socket) because the whole batch waits for it.
 */
public interface GenerationEngine extends AutoCloseable {

    /**
     * Queues a request; it joins the batch at the next step with room for it.
     *
     * @param request the prompt and how to pick its tokens
     * @param stream where its tokens and its end go
     * @return the handle that cancels it
     * @throws EngineFullException if the engine's queue of waiting requests is full (a server answers 429)
     * @throws IllegalArgumentException if the request cannot ever run here (prompt plus budget longer than the
     *     model's context, ids outside the vocabulary); the message names the value and the limit
     * @throws IllegalStateException if the engine is closed
     */
    RequestHandle submit(EngineRequest request, TokenStream stream);

    /** @return the longest prompt plus new tokens one request may have */
    int maxSequenceLength();

    /** @return ids a prompt token may take and a picked token can be */
    int vocabularySize();

    /** @return how many requests are running or waiting now */
    int pendingRequests();

    /**
     * Stops taking requests, ends every running and waiting one with {@link FinishReason#CANCELLED}, stops the
     * engine's thread and frees its memory.
     */
    @Override
    void close();

    /** Why a request ended. */
    enum FinishReason {
        /** It picked one of its stop token ids (the termination id included); that token is not streamed. */
        STOP,
        /** It produced its {@link EngineRequest#maxTokens()} tokens, or reached the model's context. */
        LENGTH,
        /** {@link RequestHandle#cancel()} or {@link GenerationEngine#close()} ended it. */
        CANCELLED
    }

    /** Cancels one request. */
    interface RequestHandle {
        /**
         * Ends the request before the next step: its slot and cache blocks are freed and its stream gets
         * {@link FinishReason#CANCELLED}. Idempotent; a no-op once the request has finished.
         */
        void cancel();
    }

    /** A request's tokens and its end, delivered on the engine's thread. */
    interface TokenStream {
        /**
         * One picked token.
         *
         * @param token the id
         * @param logprob its log-probability under the request's sampling distribution before the cut to top-k
         *     or top-p (the model's softmax at the request's temperature), or {@code Float.NaN} when the
         *     request did not ask for log-probabilities
         */
        void onToken(int token, float logprob);

        /**
         * The request ended normally.
         *
         * @param reason why
         * @param promptTokens the prompt's length
         * @param completionTokens how many tokens were streamed
         */
        void onFinish(FinishReason reason, int promptTokens, int completionTokens);

        /**
         * The request failed (the engine's step threw); the engine goes on with the other requests if it can.
         *
         * @param error what went wrong
         */
        void onError(Throwable error);
    }

    /** Thrown by {@link #submit} when the queue of waiting requests is full. */
    final class EngineFullException extends RuntimeException {
        private static final long serialVersionUID = 1L;

        /** @param message names the queue's capacity */
        public EngineFullException(String message) {
            super(message);
        }
    }
}
