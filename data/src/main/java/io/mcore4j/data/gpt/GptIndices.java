package io.mcore4j.data.gpt;

/**
 * Builds the three arrays that order a GPT dataset's samples exactly as Megatron-Core's {@code GPTDataset}
 * builds them ({@code _build_document_sample_shuffle_indices}), so that the same data, seed, sequence length,
 * sample count and split give the same samples in the same order.
 *
 * <ul>
 *   <li>document index: the split's documents repeated once per epoch and shuffled; when the last epoch
 *       contributes less than 80 % of an epoch's samples it is shuffled on its own, so that its few samples
 *       are not spread over the whole run;</li>
 *   <li>sample index: for sample {@code s}, the (document-index position, token offset) where it starts
 *       ({@code helpers.build_sample_idx}): each sample takes {@code sequenceLength + 1} tokens of the
 *       concatenated documents and the next one starts on its last token. A sample that ends exactly at a
 *       document's end points at that document's last token, and a document of length 0 is stepped over;</li>
 *   <li>shuffle index: a permutation of the sample numbers (with the separate last epoch apart again).</li>
 * </ul>
 *
 * <p>One {@link NumpyRandomState} seeded with the dataset seed draws the document shuffles, then the sample
 * shuffle, in Megatron's order. Arrays are Java arrays: a split holds fewer than 2^31 documents times epochs
 * and fewer than 2^31 samples.
 */
final class GptIndices {
    /** Below this share of an epoch's samples the final epoch is shuffled separately (as Megatron does). */
    static final double SEPARATE_FINAL_EPOCH_THRESHOLD = 0.80;

    final int[] documentIndex;
    final int[] sampleIndex;
    final int[] shuffleIndex;

    private GptIndices(int[] documentIndex, int[] sampleIndex, int[] shuffleIndex) {
        this.documentIndex = documentIndex;
        this.sampleIndex = sampleIndex;
        this.shuffleIndex = shuffleIndex;
    }

    static GptIndices build(DocumentSource source, DocumentRange range, int sequenceLength, long requestedSamples, long seed) {
        if (range.isEmpty()) {
            throw new IllegalArgumentException("documents " + range + " of " + source + " are empty");
        }
        if (range.end() > Integer.MAX_VALUE) {
            throw new IllegalArgumentException("document " + range.end() + " of " + source + " exceeds the int range of the document index");
        }
        int documents = (int) range.size();
        int first = (int) range.start();
        long tokensPerEpoch = 0;
        for (int d = 0; d < documents; d++) {
            tokensPerEpoch += source.documentLength(first + d);
        }
        if (tokensPerEpoch <= 1) {
            throw new IllegalArgumentException("documents " + range + " of " + source + " hold " + tokensPerEpoch
                    + " tokens: a sample needs at least 2");
        }
        // Megatron's _get_num_epochs: add epochs until they hold requestedSamples * sequenceLength + 1 tokens
        long neededTokens = Math.addExact(Math.multiplyExact(requestedSamples, (long) sequenceLength), 1);
        long epochs = Math.max(1, (neededTokens + tokensPerEpoch - 1) / tokensPerEpoch);
        long documentIndexLength = Math.multiplyExact(epochs, documents);
        long builtSamples = (epochs * tokensPerEpoch - 1) / sequenceLength;
        if (documentIndexLength >= Integer.MAX_VALUE || builtSamples >= Integer.MAX_VALUE / 2) {
            throw new IllegalArgumentException(requestedSamples + " samples of " + sequenceLength + " tokens need " + epochs
                    + " epochs of " + documents + " documents: beyond the 2^31 entries an index array can hold");
        }
        boolean separateFinalEpoch = false;
        long samplesBeforeFinalEpoch = 0;
        if (epochs > 1) {
            samplesBeforeFinalEpoch = ((epochs - 1) * tokensPerEpoch - 1) / sequenceLength;
            long samplesPerEpoch = (tokensPerEpoch - 1) / sequenceLength;
            long samplesFromFinalEpoch = requestedSamples - samplesBeforeFinalEpoch;
            // Python's int(0.8 * n) truncates toward zero, as the long cast does
            separateFinalEpoch = samplesFromFinalEpoch < (long) (SEPARATE_FINAL_EPOCH_THRESHOLD * samplesPerEpoch);
        }
        NumpyRandomState random = new NumpyRandomState(seed);

        int[] documentIndex = new int[(int) documentIndexLength];
        for (int e = 0, k = 0; e < epochs; e++) {
            for (int d = 0; d < documents; d++) {
                documentIndex[k++] = first + d;
            }
        }
        if (separateFinalEpoch) {
            int split = (int) ((epochs - 1) * documents);
            random.shuffle(documentIndex, 0, split);
            random.shuffle(documentIndex, split, documentIndex.length);
        } else {
            random.shuffle(documentIndex, 0, documentIndex.length);
        }

        int samples = (int) builtSamples;
        int[] sampleIndex = sampleIndex(source, documentIndex, sequenceLength, samples);

        int[] shuffleIndex = new int[samples];
        for (int s = 0; s < samples; s++) {
            shuffleIndex[s] = s;
        }
        if (separateFinalEpoch) {
            random.shuffle(shuffleIndex, 0, (int) samplesBeforeFinalEpoch);
            random.shuffle(shuffleIndex, (int) samplesBeforeFinalEpoch, samples);
        } else {
            random.shuffle(shuffleIndex, 0, samples);
        }
        return new GptIndices(documentIndex, sampleIndex, shuffleIndex);
    }

    /**
     * Megatron's {@code build_sample_idx} with {@code drop_last_partial_sequence} and one extra token per
     * sample: {@code samples + 1} rows of (document-index position, offset), flattened.
     */
    private static int[] sampleIndex(DocumentSource source, int[] documentIndex, int sequenceLength, int samples) {
        int[] sampleIndex = new int[2 * (samples + 1)];
        int position = 0;
        int offset = 0;
        for (int s = 1; s <= samples; s++) {
            long remaining = sequenceLength + 1L;
            while (remaining != 0) {
                int available = source.documentLength(documentIndex[position]) - offset;
                remaining -= available;
                if (remaining <= 0) {
                    // the sample ends inside this document; the next one starts on its last token
                    offset += (int) (remaining + available - 1);
                    remaining = 0;
                } else {
                    position++;
                    offset = 0;
                }
            }
            sampleIndex[2 * s] = position;
            sampleIndex[2 * s + 1] = offset;
        }
        return sampleIndex;
    }
}
