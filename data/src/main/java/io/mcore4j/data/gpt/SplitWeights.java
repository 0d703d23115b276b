package io.mcore4j.data.gpt;

import java.util.Arrays;

/**
 * Relative sizes of the train, valid and test splits, as in {@code --split 969,30,1}.
 *
 * <p>A dataset of {@code N} documents is cut into three contiguous ranges as Megatron cuts it: each split
 * gets {@code round(weight / sum * N)} documents (ties to even), and any rounding surplus or deficit is
 * taken from the ranges' ends so that they cover exactly {@code [0, N)}.
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
     * The documents one split gets from a dataset.
     *
     * @param split which split
     * @param documentCount documents in the dataset
     * @return the contiguous range
     */
    public DocumentRange range(DatasetSplit split, long documentCount) {
        long[] bounds = bounds(documentCount);
        return new DocumentRange(bounds[split.ordinal()], bounds[split.ordinal() + 1]);
    }

    private long[] bounds(long n) {
        double sum = train + valid + test;
        double[] w = {train / sum, valid / sum, test / sum};
        long[] b = new long[4];
        for (int k = 0; k < 3; k++) {
            b[k + 1] = b[k] + (long) Math.rint(w[k] * n);
        }
        long surplus = b[3] - n;
        for (int k = 1; k <= 3; k++) {
            b[k] = Math.max(b[k - 1], Math.min(n, b[k] - surplus));
        }
        b[3] = n;
        return b;
    }

    @Override
    public String toString() {
        return Arrays.toString(new double[] {train, valid, test});
    }
}
