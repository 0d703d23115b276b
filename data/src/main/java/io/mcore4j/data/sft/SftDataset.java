package io.mcore4j.data.sft;

import io.mcore4j.data.gpt.MaskedSampleDataset;
import io.mcore4j.data.gpt.SampleDataset;
import io.mcore4j.data.indexed.IndexedDatasetReader;

/**
 * One split of a tokenized supervised fine-tuning corpus ({@link SftCorpus}): sample {@code i} is conversation
 * {@code first + i}, one conversation per sample ({@link PackedSftDataset} packs several into each), its tokens cut
 * to {@code sequenceLength + 1} or padded to it with the pad id; the loss mask is the conversation's
 * assistant-token mask shifted onto the labels, 0 on padding. Reads are safe from several threads.
 */
public final class SftDataset implements MaskedSampleDataset {
    private final SftCorpus corpus;
    private final long first;
    private final long count;
    private final int sequenceLength;
    private final int padId;

    /**
     * @param corpus the tokenized conversations
     * @param first the split's first conversation
     * @param count the split's conversations
     * @param sequenceLength tokens the model sees per sample
     * @param padId the id that fills a sample after its conversation
     */
    public SftDataset(SftCorpus corpus, long first, long count, int sequenceLength, int padId) {
        if (first < 0 || count < 0 || first + count > corpus.size()) {
            throw new IllegalArgumentException("conversations [" + first + ", " + (first + count) + ") are not within the "
                    + corpus.size() + " of the corpus");
        }
        if (sequenceLength < 1) {
            throw new IllegalArgumentException("sequence length " + sequenceLength + " must be at least 1");
        }
        this.corpus = corpus;
        this.first = first;
        this.count = count;
        this.sequenceLength = sequenceLength;
        this.padId = padId;
    }

    @Override
    public long size() {
        return count;
    }

    @Override
    public int sequenceLength() {
        return sequenceLength;
    }

    @Override
    public void sample(long index, int[] destination) {
        int n = read(corpus.tokens(), index, destination);
        java.util.Arrays.fill(destination, n, sequenceLength + 1, padId);
    }

    @Override
    public void lossMask(long index, int[] destination) {
        int[] mask = new int[sequenceLength + 1];
        int n = read(corpus.lossMask(), index, mask);
        for (int t = 0; t < sequenceLength; t++) {
            destination[t] = t + 1 < n ? mask[t + 1] : 0;
        }
    }

    /** Copies the first {@code sequenceLength + 1} values of a conversation; returns how many it has of them. */
    private int read(IndexedDatasetReader reader, long index, int[] destination) {
        SampleDataset.checkIndex(index, count);
        long conversation = first + index;
        int n = (int) Math.min(reader.documentLength(conversation), sequenceLength + 1L);
        reader.readDocument(conversation, 0, n, destination, 0);
        return n;
    }
}
