package io.mcore4j.data.sft;

import io.mcore4j.data.gpt.PackedSampleDataset;
import io.mcore4j.data.gpt.SampleDataset;
import io.mcore4j.data.indexed.IndexedDatasetReader;

import java.util.Arrays;

/**
 * One split of a tokenized supervised fine-tuning corpus ({@link SftCorpus}) with whole conversations packed into
 * rows of {@code sequenceLength} positions, as Megatron Bridge packs fine-tuning data: a conversation of {@code n}
 * tokens fills {@code n - 1} positions, its inputs {@code tokens[0, n-1)} and its labels {@code tokens[1, n)} (shifted
 * within the conversation, as an unpacked sample shifts them), the labels' loss mask its assistant mask; one longer
 * than a row is cut as {@link SftDataset} cuts it (its first {@code sequenceLength + 1} tokens). Each conversation's
 * positions are rounded up to a multiple of {@code multiple} (2·CP under context parallelism, so that each
 * conversation is split per sequence) with padding of loss mask 0; the row's tail is padding, a sequence of its own
 * of loss mask 0. The rows are planned by {@link PackingPlan#firstFitDecreasing} from the conversations' lengths in
 * the corpus's index, when the dataset is made (not cached: it takes a fraction of a second for a million
 * conversations, and depends on the sequence length and the multiple, which the corpus's cache does not).
 * Reads are safe from several threads.
 */
public final class PackedSftDataset implements PackedSampleDataset {
    private final SftCorpus corpus;
    private final long first;
    private final int sequenceLength;
    private final int padId;
    private final int[] positions;
    private final PackingPlan plan;

    /**
     * @param corpus the tokenized conversations
     * @param first the split's first conversation
     * @param count the split's conversations
     * @param sequenceLength positions per row
     * @param padId the id of padding inputs and labels
     * @param multiple every conversation's positions are rounded up to a multiple of this (1: none); it must divide
     *                 {@code sequenceLength}
     * @throws IllegalArgumentException if the range is not within the corpus, or the lengths do not fit
     */
    public PackedSftDataset(SftCorpus corpus, long first, long count, int sequenceLength, int padId, int multiple) {
        if (first < 0 || count < 0 || first + count > corpus.size()) {
            throw new IllegalArgumentException("conversations [" + first + ", " + (first + count) + ") are not within the "
                    + corpus.size() + " of the corpus");
        }
        if (count > Integer.MAX_VALUE - 8) {
            throw new IllegalArgumentException(count + " conversations are more than one split can pack");
        }
        if (sequenceLength < 1 || multiple < 1 || sequenceLength % multiple != 0) {
            throw new IllegalArgumentException("sequence length " + sequenceLength + " must be a positive multiple of "
                    + multiple);
        }
        this.corpus = corpus;
        this.first = first;
        this.sequenceLength = sequenceLength;
        this.padId = padId;
        this.positions = new int[(int) count];
        for (int k = 0; k < positions.length; k++) {
            int filled = Math.max(trained(k), 1); // a conversation of one token still takes a (padding) position
            positions[k] = Math.min((filled + multiple - 1) / multiple * multiple, sequenceLength);
        }
        this.plan = PackingPlan.firstFitDecreasing(positions, sequenceLength);
    }

    /** The positions of conversation {@code k} of the split whose input and label are both its tokens. */
    private int trained(int k) {
        return (int) Math.min(Math.max(corpus.tokens().documentLength(first + k) - 1, 0), sequenceLength);
    }

    @Override
    public long size() {
        return plan.rows();
    }

    @Override
    public int sequenceLength() {
        return sequenceLength;
    }

    /**
     * @param row a row index in {@code [0, size())}
     * @return the corpus indices of the conversations packed into the row, in row order
     * @throws IndexOutOfBoundsException if the row is outside the dataset
     */
    public long[] conversations(long row) {
        return Arrays.stream(plan.row(checked(row))).mapToLong(k -> first + k).toArray();
    }

    /** Writes the row's inputs, then one padding id at {@code sequenceLength()} (see {@link PackedSampleDataset}). */
    @Override
    public void sample(long index, int[] destination) {
        Arrays.fill(destination, 0, sequenceLength + 1, padId);
        place(corpus.tokens(), index, 0, destination);
    }

    @Override
    public void labels(long index, int[] destination) {
        Arrays.fill(destination, 0, sequenceLength, padId);
        place(corpus.tokens(), index, 1, destination);
    }

    @Override
    public void lossMask(long index, int[] destination) {
        Arrays.fill(destination, 0, sequenceLength, 0);
        place(corpus.lossMask(), index, 1, destination);
    }

    @Override
    public int[] sequenceLengths(long index) {
        int[] row = plan.row(checked(index));
        int[] lengths = new int[row.length + 1];
        int used = 0;
        for (int i = 0; i < row.length; i++) {
            lengths[i] = positions[row[i]];
            used += lengths[i];
        }
        lengths[row.length] = sequenceLength - used;
        return used == sequenceLength ? Arrays.copyOf(lengths, row.length) : lengths;
    }

    /**
     * Copies values {@code [shift, shift + trained)} of each conversation of a row to its positions in the row: the
     * inputs at shift 0, the labels (or their mask) at shift 1.
     */
    private void place(IndexedDatasetReader reader, long index, int shift, int[] destination) {
        int position = 0;
        for (int k : plan.row(checked(index))) {
            int n = trained(k);
            if (n > 0) {
                reader.readDocument(first + k, shift, n, destination, position);
            }
            position += positions[k];
        }
    }

    private int checked(long index) {
        SampleDataset.checkIndex(index, size());
        return (int) index;
    }
}
