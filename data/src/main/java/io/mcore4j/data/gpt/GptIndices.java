package io.mcore4j.data.gpt;

/**
 * Builds the three arrays that order a GPT dataset's samples.
 *
 * <ul>
 *   <li>document index: the split's documents repeated once per epoch, shuffled; when the last epoch
 *       contributes less than 80 % of an epoch's samples it is shuffled on its own, so that its few samples
 *       are not spread over the whole run;</li>
 *   <li>sample index: for sample {@code s}, the (document-index position, token offset) of its first token.
 *       Each sample advances {@code sequenceLength} tokens through the concatenated documents and ends on
 *       the token where the next one starts, giving {@code sequenceLength + 1} tokens (inputs plus shifted
 *       labels);</li>
 *   <li>shuffle index: a permutation of the sample numbers (again with the separate last epoch apart).</li>
 * </ul>
 *
 * <p>One {@link ShuffleRandom} seeded with the dataset seed draws the document shuffles, then the sample
 * shuffle, so everything follows from the seed. Arrays are Java arrays: a split holds fewer than 2^31
 * documents times epochs and fewer than 2^31 samples.
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
        int[] lengths = new int[documents];
        long tokensPerEpoch = 0;
        for (int d = 0; d < documents; d++) {
            lengths[d] = source.documentLength(range.start() + d);
            tokensPerEpoch += lengths[d];
        }
        if (tokensPerEpoch == 0) {
            throw new IllegalArgumentException("documents " + range + " of " + source + " hold no tokens");
        }
        // an epoch count E yields (E * tokensPerEpoch - 1) / sequenceLength samples: take the smallest E that is enough
        long neededTokens = Math.addExact(Math.multiplyExact(requestedSamples, (long) sequenceLength), 1);
        long epochs = (neededTokens + tokensPerEpoch - 1) / tokensPerEpoch;
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
            separateFinalEpoch = samplesFromFinalEpoch < (long) (SEPARATE_FINAL_EPOCH_THRESHOLD * samplesPerEpoch);
        }
        ShuffleRandom random = new ShuffleRandom(seed);

        int[] documentIndex = new int[(int) documentIndexLength];
        for (int e = 0, k = 0; e < epochs; e++) {
            for (int d = 0; d < documents; d++) {
                documentIndex[k++] = (int) range.start() + d;
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
        int[] sampleIndex = new int[2 * (samples + 1)];
        int position = 0;
        int offset = 0;
        // start on a real token: skip leading empty documents
        while (lengths[documentIndex[position] - (int) range.start()] == 0) {
            position++;
        }
        for (int s = 0; s <= samples; s++) {
            if (s > 0) {
                long remaining = sequenceLength;
                while (remaining > 0) {
                    int available = lengths[documentIndex[position] - (int) range.start()] - offset;
                    if (available > remaining) {
                        offset += (int) remaining;
                        remaining = 0;
                    } else {
                        remaining -= available;
                        position++;
                        offset = 0;
                    }
                }
                // the next sample starts on this token; if it is the end of a document, that is the next non-empty one's first
                while (offset == lengths[documentIndex[position] - (int) range.start()]) {
                    position++;
                    offset = 0;
                }
            }
            sampleIndex[2 * s] = position;
            sampleIndex[2 * s + 1] = offset;
        }

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
}
