package io.mcore4j.data.gpt;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;
import java.util.Optional;

/**
 * Which component dataset, and which of its samples, each sample of a blend comes from, in Megatron-Core's
 * {@code BlendedDataset} order ({@code helpers.build_blending_indices}).
 *
 * <p>Sample {@code i} goes to the dataset with the largest error {@code weight * max(i, 1) - count} (the
 * lowest index on ties), and takes that dataset's next unused sample. The index depends only on the
 * normalized weights and the size, which is what {@link #buildCached} keys its cache files on.
 */
public final class BlendingIndex {
    private static final List<String> ARRAY_NAMES = List.of("dataset_index", "dataset_sample_index", "counts");

    private final IndexArray datasetIndex;
    private final IndexArray datasetSampleIndex;
    private final long[] counts;

    private BlendingIndex(IndexArray datasetIndex, IndexArray datasetSampleIndex, long[] counts) {
        this.datasetIndex = datasetIndex;
        this.datasetSampleIndex = datasetSampleIndex;
        this.counts = counts;
    }

    /**
     * Loads the index from a cache directory, or builds it and stores it there, as
     * {@code blend.<hash>.dataset_index.bin} and so on.
     *
     * @param weights one positive weight per dataset
     * @param size number of blended samples
     * @param cacheDirectory where the arrays live
     * @return the index
     * @throws UncheckedIOException if a freshly built index cannot be written
     */
    public static BlendingIndex buildCached(double[] weights, long size, Path cacheDirectory) {
        IndexCache cache = new IndexCache(cacheDirectory, "blend");
        double[] normalized = normalize(weights);
        String description = "mcore4j BlendingIndex v2 (Megatron-Core order)\nweights=" + Arrays.toString(normalized) + "\nsize=" + size + "\n";
        Optional<List<IndexArray>> cached = cache.load(description, ARRAY_NAMES);
        if (cached.isPresent() && cached.get().get(2).length() == weights.length) {
            long[] counts = new long[weights.length];
            for (int d = 0; d < counts.length; d++) {
                counts[d] = cached.get().get(2).get(d);
            }
            return new BlendingIndex(cached.get().get(0), cached.get().get(1), counts);
        }
        int[][] arrays = compute(normalized, size);
        try {
            cache.store(description, ARRAY_NAMES, List.of(arrays[0], arrays[1], arrays[2]));
        } catch (IOException e) {
            throw new UncheckedIOException("cannot write blending index cache " + cache.file(description, "*"), e);
        }
        return fromArrays(arrays);
    }

    /**
     * Computes the index for a blend.
     *
     * @param weights one positive weight per dataset (normalized here)
     * @param size number of blended samples, below 2^31
     * @return the index
     * @throws IllegalArgumentException if a weight is not positive or the size is out of range
     */
    public static BlendingIndex build(double[] weights, long size) {
        return fromArrays(compute(normalize(weights), size));
    }

    private static double[] normalize(double[] weights) {
        if (weights.length == 0 || weights.length > Short.MAX_VALUE) {
            throw new IllegalArgumentException("a blend needs 1.." + Short.MAX_VALUE + " datasets, got " + weights.length);
        }
        for (double w : weights) {
            if (!(w > 0) || Double.isInfinite(w)) {
                throw new IllegalArgumentException("blend weight " + w + " must be positive and finite");
            }
        }
        return NumpySum.normalize(weights);
    }

    /** Dataset index, dataset sample index and per-dataset counts. */
    private static int[][] compute(double[] share, long size) {
        if (size < 0 || size >= Integer.MAX_VALUE) {
            throw new IllegalArgumentException("blend size " + size + " must be in [0, 2^31 - 1)");
        }
        int n = (int) size;
        int[] datasetIndex = new int[n];
        int[] datasetSampleIndex = new int[n];
        int[] counts = new int[share.length];
        for (int i = 0; i < n; i++) {
            double position = Math.max(i, 1.0);
            int best = 0;
            double bestError = share[0] * position - counts[0];
            for (int d = 1; d < share.length; d++) {
                double error = share[d] * position - counts[d];
                if (error > bestError) {
                    bestError = error;
                    best = d;
                }
            }
            datasetIndex[i] = best;
            datasetSampleIndex[i] = counts[best]++;
        }
        return new int[][] {datasetIndex, datasetSampleIndex, counts};
    }

    private static BlendingIndex fromArrays(int[][] arrays) {
        long[] counts = Arrays.stream(arrays[2]).asLongStream().toArray();
        return new BlendingIndex(IndexArray.of(arrays[0]), IndexArray.of(arrays[1]), counts);
    }

    /**
     * Number of blended samples.
     *
     * @return the size
     */
    public long size() {
        return datasetIndex.length();
    }

    /**
     * The dataset that blended sample {@code i} comes from.
     *
     * @param i blended sample index
     * @return the component index
     */
    public int datasetIndex(long i) {
        SampleDataset.checkIndex(i, datasetIndex.length());
        return datasetIndex.get(i);
    }

    /**
     * The sample of its dataset that blended sample {@code i} is.
     *
     * @param i blended sample index
     * @return the index within the component
     */
    public long datasetSampleIndex(long i) {
        SampleDataset.checkIndex(i, datasetIndex.length());
        return datasetSampleIndex.get(i);
    }

    /**
     * How many samples each dataset contributes: the sample count each component must provide.
     *
     * @return a copy of the per-dataset counts
     */
    public long[] counts() {
        return counts.clone();
    }

    @Override
    public String toString() {
        return "BlendingIndex(size=" + datasetIndex.length() + ", counts=" + Arrays.toString(counts) + ")";
    }
}
