package io.mcore4j.data.gpt;

/**
 * Samples whose loss is taken on some of their tokens only (supervised fine-tuning: the assistant's tokens).
 * Like every {@link SampleDataset}, deterministic and safe for concurrent reads.
 */
public interface MaskedSampleDataset extends SampleDataset {
    /**
     * Writes one sample's loss mask: {@code destination[t]} is 1 when the loss of predicting label
     * {@code sample[t + 1]} from the tokens up to {@code t} counts, 0 when it is ignored.
     *
     * @param index sample index in {@code [0, size())}
     * @param destination an array of at least {@code sequenceLength()} elements
     * @throws IndexOutOfBoundsException if the index is outside the dataset
     */
    void lossMask(long index, int[] destination);
}
