package io.mcore4j.tensorparallel;

/**
 * Vocabulary sizes under tensor parallelism: padding and each rank's range of token ids.
 *
 * <p>A vocabulary-parallel layer splits the (padded) vocabulary into equal contiguous ranges, rank
 * {@code r} of {@code t} owning ids {@code [r * V / t, (r + 1) * V / t)}.
 */
public final class Vocab {
    private Vocab() {}

    /**
     * The smallest multiple of {@code divisor * tensorParallel} that is at least {@code vocabSize},
     * so that every tensor-parallel rank holds an equal, {@code divisor}-aligned slice (Megatron's
     * {@code make-vocab-size-divisible-by}).
     *
     * @param vocabSize the tokenizer's vocabulary size, at least 1
     * @param divisor the alignment of each rank's slice, at least 1 (e.g. 128)
     * @param tensorParallel the tensor-parallel size, at least 1
     * @return the padded size
     * @throws IllegalArgumentException if an argument is below 1 or the result overflows an int
     */
    public static int padded(int vocabSize, int divisor, int tensorParallel) {
        if (vocabSize < 1) {
            throw new IllegalArgumentException("vocabulary size must be at least 1, got " + vocabSize);
        }
        if (divisor < 1) {
            throw new IllegalArgumentException("vocabulary divisor must be at least 1, got " + divisor);
        }
        if (tensorParallel < 1) {
            throw new IllegalArgumentException("tensor parallel size must be at least 1, got " + tensorParallel);
        }
        long multiple = (long) divisor * tensorParallel;
        long padded = (vocabSize + multiple - 1) / multiple * multiple;
        if (padded > Integer.MAX_VALUE) {
            throw new IllegalArgumentException("vocabulary size " + vocabSize + " padded to a multiple of "
                    + multiple + " overflows an int");
        }
        return (int) padded;
    }

    /**
     * Number of vocabulary entries each rank owns.
     *
     * @param vocabSize the full (padded) vocabulary size
     * @param tensorParallel the tensor-parallel size
     * @return {@code vocabSize / tensorParallel}
     * @throws IllegalArgumentException naming both numbers if the size is not divisible
     */
    public static int perRank(int vocabSize, int tensorParallel) {
        if (vocabSize < 1) {
            throw new IllegalArgumentException("vocabulary size must be at least 1, got " + vocabSize);
        }
        if (vocabSize % tensorParallel != 0) {
            throw new IllegalArgumentException("vocabulary size " + vocabSize
                    + " is not divisible by tensor parallel size " + tensorParallel
                    + "; pad it with Vocab.padded(" + vocabSize + ", divisor, " + tensorParallel + ")");
        }
        return vocabSize / tensorParallel;
    }
}
