package io.mcore4j.data.gpt;

/**
 * Samples that are rows of several whole sequences packed one after another (Megatron Bridge's packed sequences,
 * Megatron-Core's {@code PackedSeqParams}): each sequence's labels are its own tokens shifted by one within it, so a
 * row's labels are not its inputs shifted by one, and the consumer must keep the sequences apart (attention and
 * positions restart at each of them).
 *
 * <p>{@link #sample(long, int[])} writes the row's {@code sequenceLength()} input tokens followed by one padding id
 * (no label); {@link #labels} gives the labels and {@link #lossMask} their weights; {@link #sequenceLengths} says
 * where the sequences start. Like every {@link SampleDataset}, deterministic and safe for concurrent reads.
 */
public interface PackedSampleDataset extends MaskedSampleDataset {
    /**
     * Writes one row's labels: {@code destination[t]} is the token that follows position {@code t}'s input within
     * its sequence, or a padding id where there is none (its loss mask is then 0).
     *
     * @param index row index in {@code [0, size())}
     * @param destination an array of at least {@code sequenceLength()} elements
     * @throws IndexOutOfBoundsException if the index is outside the dataset
     */
    void labels(long index, int[] destination);

    /**
     * The lengths of one row's sequences in order, trailing padding being a sequence of its own; they sum to
     * {@code sequenceLength()}.
     *
     * @param index row index in {@code [0, size())}
     * @return a new array of positive lengths
     * @throws IndexOutOfBoundsException if the index is outside the dataset
     */
    int[] sequenceLengths(long index);
}
