package io.mcore4j.data.gpt;

/**
 * {@code numpy.sum} of a float64 vector, bit for bit: numpy adds with its pairwise algorithm (eight
 * accumulators for blocks of up to 128 elements, halving above that), so a plain left-to-right loop can differ
 * in the last bit from nine elements on. Megatron normalizes split and blend weights with it.
 */
final class NumpySum {
    private static final int BLOCK = 128;

    private NumpySum() {}

    /**
     * @param values the vector
     * @return {@code numpy.sum(values)}
     */
    static double sum(double[] values) {
        return pairwise(values, 0, values.length);
    }

    /**
     * Megatron's {@code normalize}: each weight divided by {@code numpy.sum} of all.
     *
     * @param weights the weights
     * @return a new array
     */
    static double[] normalize(double[] weights) {
        double total = sum(weights);
        double[] out = new double[weights.length];
        for (int k = 0; k < weights.length; k++) {
            out[k] = weights[k] / total;
        }
        return out;
    }

    private static double pairwise(double[] a, int from, int n) {
        if (n < 8) {
            double res = 0.0;
            for (int i = 0; i < n; i++) {
                res += a[from + i];
            }
            return res;
        }
        if (n <= BLOCK) {
            double[] r = new double[8];
            System.arraycopy(a, from, r, 0, 8);
            int i;
            for (i = 8; i < n - (n % 8); i += 8) {
                for (int j = 0; j < 8; j++) {
                    r[j] += a[from + i + j];
                }
            }
            double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
            for (; i < n; i++) {
                res += a[from + i];
            }
            return res;
        }
        int half = n / 2;
        half -= half % 8;
        return pairwise(a, from, half) + pairwise(a, from + half, n - half);
    }
}
