package io.mcore4j.data.gpt;

/**
 * Synthetic GPT samples for benchmarks and tests that need no files: any number of samples, each token a
 * hash of (seed, sample, position) reduced to the vocabulary, so the dataset takes no memory and the same
 * arguments always give the same tokens.
 */
public final class MockGptDataset implements SampleDataset {
    private final long size;
    private final int sequenceLength;
    private final int vocabularySize;
    private final long seed;

    /**
     * Creates the dataset.
     *
     * @param size number of samples
     * @param sequenceLength tokens per sample seen by the model (samples hold one more)
     * @param vocabularySize token ids are drawn from {@code [0, vocabularySize)}
     * @param seed varies the tokens
     */
    public MockGptDataset(long size, int sequenceLength, int vocabularySize, long seed) {
        if (size < 0) {
            throw new IllegalArgumentException("mock dataset size " + size + " must not be negative");
        }
        if (sequenceLength <= 0) {
            throw new IllegalArgumentException("sequence length " + sequenceLength + " must be positive");
        }
        if (vocabularySize <= 0) {
            throw new IllegalArgumentException("vocabulary size " + vocabularySize + " must be positive");
        }
        this.size = size;
        this.sequenceLength = sequenceLength;
        this.vocabularySize = vocabularySize;
        this.seed = seed;
    }

    @Override
    public long size() {
        return size;
    }

    @Override
    public int sequenceLength() {
        return sequenceLength;
    }

    /**
     * The vocabulary the tokens are drawn from.
     *
     * @return its size
     */
    public int vocabularySize() {
        return vocabularySize;
    }

    @Override
    public void sample(long index, int[] destination) {
        SampleDataset.checkIndex(index, size);
        long base = SplitMix64.mix(seed ^ SplitMix64.mix(index + 0x632BE59BD9B4E019L));
        for (int k = 0; k <= sequenceLength; k++) {
            long h = SplitMix64.mix(base + k * 0x9E3779B97F4A7C15L);
            destination[k] = (int) Long.remainderUnsigned(h, vocabularySize);
        }
    }
}
