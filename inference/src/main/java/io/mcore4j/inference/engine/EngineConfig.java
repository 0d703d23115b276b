package io.mcore4j.inference.engine;

/**
 * How a {@link ContinuousBatchingEngine} sizes its cache, its batches and its queue (vLLM's engine arguments where
 * they exist). Validated once; {@link #builder()} starts from the defaults.
 *
 * @param blockSize positions per cache block (vLLM's {@code --block-size}, default 16)
 * @param numBlocks blocks per layer pool, the null block included; 0 sizes the pools so that
 *     {@code maxNumSeqs} sequences of {@code maxModelLength} positions all fit
 * @param maxNumSeqs the most requests running at once (vLLM's {@code --max-num-seqs}, default 32); also the
 *     largest decode batch, so the largest graph bucket
 * @param maxNumBatchedTokens the tokens one engine step runs, decodes and prefill chunks together (vLLM's
 *     {@code --max-num-batched-tokens}, default 512): a longer prompt is prefilled in chunks over several steps
 *     beside the running decodes
 * @param maxWaitingRequests the most requests waiting to start; one more is refused with
 *     {@link GenerationEngine.EngineFullException} (default 256)
 * @param maxModelLength the longest prompt plus new tokens (vLLM's {@code --max-model-len}); 0 takes the model's
 *     max sequence length. Decode steps attend over this many positions per sequence (their shapes are fixed)
 * @param vocabularySize ids a prompt may hold and a token may take (the tokenizer's); 0 takes the model's
 * @param terminationId the end-of-sequence id that ends a request with STOP, or -1 for none
 * @param cudaGraphs whether decode steps are captured into CUDA graphs, one per batch-size bucket, where the device
 *     can (on every tensor-parallel rank, their collectives inside; elsewhere they run eagerly, the same code)
 */
public record EngineConfig(int blockSize, int numBlocks, int maxNumSeqs, int maxNumBatchedTokens, int maxWaitingRequests,
                           int maxModelLength, int vocabularySize, int terminationId, boolean cudaGraphs) {

    /** Validates the values, naming the bad one. */
    public EngineConfig {
        positive("block size", blockSize);
        positive("max num seqs", maxNumSeqs);
        positive("max num batched tokens", maxNumBatchedTokens);
        positive("max waiting requests", maxWaitingRequests);
        if (numBlocks < 0 || numBlocks == 1) {
            throw new IllegalArgumentException("num blocks " + numBlocks + " must be 0 (sized from max num seqs) or at"
                    + " least 2 (block 0 is the null block)");
        }
        if (maxModelLength < 0 || vocabularySize < 0) {
            throw new IllegalArgumentException("max model length " + maxModelLength + " and vocabulary size "
                    + vocabularySize + " must be >= 0 (0 = the model's)");
        }
        if (terminationId < -1) {
            throw new IllegalArgumentException("termination id " + terminationId + " must be -1 (none) or an id");
        }
    }

    private static void positive(String what, int value) {
        if (value < 1) {
            throw new IllegalArgumentException(what + " " + value + " must be positive");
        }
    }

    /** @return a builder holding the defaults */
    public static Builder builder() {
        return new Builder();
    }

    /** {@link #maxNumSeqs()} unless set (vLLM's {@code --max-num-seqs} is larger; this suits one GPU's cache). */
    public static final int DEFAULT_MAX_NUM_SEQS = 32;

    /** Options of an {@link EngineConfig}, each defaulting as the record says. */
    public static final class Builder {
        private int blockSize = 16;
        private int numBlocks;
        private int maxNumSeqs = DEFAULT_MAX_NUM_SEQS;
        private int maxNumBatchedTokens = 512;
        private int maxWaitingRequests = 256;
        private int maxModelLength;
        private int vocabularySize;
        private int terminationId = -1;
        private boolean cudaGraphs = true;

        private Builder() {
        }

        /** @param v positions per block @return this */
        public Builder blockSize(int v) {
            blockSize = v;
            return this;
        }

        /** @param v blocks per pool (0: sized from max num seqs) @return this */
        public Builder numBlocks(int v) {
            numBlocks = v;
            return this;
        }

        /** @param v the most running requests @return this */
        public Builder maxNumSeqs(int v) {
            maxNumSeqs = v;
            return this;
        }

        /** @param v tokens per engine step @return this */
        public Builder maxNumBatchedTokens(int v) {
            maxNumBatchedTokens = v;
            return this;
        }

        /** @param v the most waiting requests @return this */
        public Builder maxWaitingRequests(int v) {
            maxWaitingRequests = v;
            return this;
        }

        /** @param v the longest prompt plus new tokens (0: the model's) @return this */
        public Builder maxModelLength(int v) {
            maxModelLength = v;
            return this;
        }

        /** @param v the tokenizer's vocabulary size (0: the model's) @return this */
        public Builder vocabularySize(int v) {
            vocabularySize = v;
            return this;
        }

        /** @param v the end-of-sequence id, or -1 @return this */
        public Builder terminationId(int v) {
            terminationId = v;
            return this;
        }

        /** @param v whether decode steps are graph-captured where the device can @return this */
        public Builder cudaGraphs(boolean v) {
            cudaGraphs = v;
            return this;
        }

        /** @return the validated config */
        public EngineConfig build() {
            return new EngineConfig(blockSize, numBlocks, maxNumSeqs, maxNumBatchedTokens, maxWaitingRequests,
                    maxModelLength, vocabularySize, terminationId, cudaGraphs);
        }
    }
}
