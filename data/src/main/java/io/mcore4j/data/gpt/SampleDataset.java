package io.mcore4j.data.gpt;

/**
 * A fixed-size, random-access list of training samples, each {@code sequenceLength() + 1} token ids long:
 * the model's input is {@code sample[0 .. sequenceLength)} and its labels are
 * {@code sample[1 .. sequenceLength]} (except in a {@link PackedSampleDataset}, whose rows of several sequences
 * shift each sequence's labels within it and give them apart).
 *
 * <p>Implementations are deterministic (the same index always gives the same tokens) and safe for
 * concurrent reads.
 */
public interface SampleDataset {
    /**
     * Number of samples.
     *
     * @return the size
     */
    long size();

    /**
     * Tokens the model sees per sample (one less than the sample length).
     *
     * @return the sequence length
     */
    int sequenceLength();

    /**
     * Writes one sample into an array.
     *
     * @param index sample index in {@code [0, size())}
     * @param destination an array of at least {@code sequenceLength() + 1} elements
     * @throws IndexOutOfBoundsException if the index is outside the dataset
     */
    void sample(long index, int[] destination);

    /**
     * One sample as a new array.
     *
     * @param index sample index in {@code [0, size())}
     * @return {@code sequenceLength() + 1} token ids
     */
    default int[] sample(long index) {
        int[] out = new int[sequenceLength() + 1];
        sample(index, out);
        return out;
    }

    /**
     * Checks a sample index against {@link #size()}.
     *
     * @param index the index
     * @param size the dataset size
     * @throws IndexOutOfBoundsException if {@code index} is outside {@code [0, size)}
     */
    static void checkIndex(long index, long size) {
        if (index < 0 || index >= size) {
            throw new IndexOutOfBoundsException("sample " + index + " is outside [0, " + size + ")");
        }
    }
}
