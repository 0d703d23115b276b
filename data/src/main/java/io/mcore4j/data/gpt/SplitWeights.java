package io.mcore4j.data.gpt;

import java.util.Arrays;

/**
 * Relative sizes of the train, valid and test splits, as in {@code --split 969,30,1}.
 *
 * <p>A dataset of {@code N} sequences (Megatron's GPT datasets count sequences, not documents) is cut into
 * three contiguous ranges exactly as Megatron-Core cuts it: the weights are normalized, their running sums
 * {@code 0, w0, w0+w1, w0+w1+w2} are the split boundaries as fractions, and each boundary becomes
 * {@code round(fraction * N)} (Python's {@code round}, ties to even). A split of weight 0 is absent
 * ({@link #includes}); a split of positive weight may still get an empty range when {@code N} is small.
 *
 * @param train weight of the training split
 * @param valid weight of the validation split
 * @param test weight of the test split
 */
public record SplitWeights(double train, double valid, double test) {
    /** Megatron's default, 969,30,1. */
    public static final SplitWeights DEFAULT = new SplitWeights(969, 30, 1);

    /** Validates the weights. */
    public SplitWeights {
        for (double w : new double[] {train, valid, test}) {
            if (!(w >= 0) || Double.isInfinite(w)) {
                throw new IllegalArgumentException("split weight " + w + " must be finite and non-negative");
            }
        }
        if (train + valid + test <= 0) {
            throw new IllegalArgumentException("split weights " + train + "," + valid + "," + test + " must not all be zero");
        }
    }

    /**
     * Parses a comma- or slash-separated list of one to three weights; missing weights are 0.
     *
     * @param text e.g. {@code "969,30,1"} or {@code "98,2"}
     * @return the weights
     * @throws IllegalArgumentException if the text is not one to three non-negative numbers, naming it
     */
    public static SplitWeights parse(String text) {
        String[] parts = text.trim().split("\\s*[,/]\\s*");
        if (parts.length < 1 || parts.length > 3 || parts[0].isEmpty()) {
            throw new IllegalArgumentException("split \"" + text + "\" must be one to three comma-separated weights");
        }
        double[] w = new double[3];
        for (int k = 0; k < parts.length; k++) {
            try {
                w[k] = Double.parseDouble(parts[k]);
            } catch (NumberFormatException e) {
                throw new IllegalArgumentException("split \"" + text + "\": weight \"" + parts[k] + "\" is not a number", e);
            }
        }
        return new SplitWeights(w[0], w[1], w[2]);
    }

    /**
     * The weight of one split.
     *
     * @param split which split
     * @return its weight
     */
    public double weight(DatasetSplit split) {
        return switch (split) {
            case TRAIN -> train;
            case VALID -> valid;
            case TEST -> test;
        };
    }

    /**
     * Whether a split exists at all: Megatron builds no dataset for a split of weight 0, whatever number of
     * samples is asked of it.
     *
     * @param split which split
     * @return true if its weight is positive
     */
    public boolean includes(DatasetSplit split) {
        double[] f = fractions();
        return f[split.ordinal() + 1] > f[split.ordinal()];
    }

    /**
     * The sequences one split gets from a dataset ({@code _build_megatron_dataset_splits}); empty for a split
     * of weight 0.
     *
     * @param split which split
     * @param sequenceCount sequences in the dataset
     * @return the contiguous range
     */
    public DocumentRange range(DatasetSplit split, long sequenceCount) {
        if (sequenceCount < 0) {
            throw new IllegalArgumentException("sequence count " + sequenceCount + " must not be negative");
        }
        if (!includes(split)) {
            return new DocumentRange(0, 0);
        }
        double[] f = fractions();
        long start = (long) Math.rint(f[split.ordinal()] * (double) sequenceCount);
        long end = (long) Math.rint(f[split.ordinal() + 1] * (double) sequenceCount);
        return new DocumentRange(start, end);
    }

    /** The split boundaries as fractions, summed in Megatron's order (normalize, then a running sum). */
    private double[] fractions() {
        double sum = train + valid + test;
        double[] f = new double[4];
        f[1] = train / sum;
        f[2] = f[1] + valid / sum;
        f[3] = f[2] + test / sum;
        return f;
    }

    @Override
    public String toString() {
        return Arrays.toString(new double[] {train, valid, test});
    }
}
