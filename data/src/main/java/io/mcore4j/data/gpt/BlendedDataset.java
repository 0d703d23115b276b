package io.mcore4j.data.gpt;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

/**
 * Samples drawn from several datasets in fixed proportions, following a {@link BlendingIndex}: blended
 * sample {@code i} is sample {@code datasetSampleIndex(i)} of component {@code datasetIndex(i)}.
 * The components are not owned.
 */
public final class BlendedDataset implements SampleDataset {
    private final List<SampleDataset> components;
    private final BlendingIndex index;
    private final int sequenceLength;

    /**
     * Blends components.
     *
     * @param components one dataset per weight of the index; a component may be null only if the index
     *     takes no sample from it
     * @param index which component and sample each blended sample is
     * @throws IllegalArgumentException if the components disagree on sequence length, or one is smaller
     *     than the count the index takes from it
     */
    public BlendedDataset(List<SampleDataset> components, BlendingIndex index) {
        long[] counts = index.counts();
        if (components.size() != counts.length) {
            throw new IllegalArgumentException(components.size() + " components for a blend of " + counts.length + " datasets");
        }
        int length = -1;
        for (int d = 0; d < counts.length; d++) {
            SampleDataset c = components.get(d);
            if (c == null) {
                if (counts[d] > 0) {
                    throw new IllegalArgumentException("component " + d + " is missing but the blend takes " + counts[d] + " samples from it");
                }
                continue;
            }
            if (c.size() < counts[d]) {
                throw new IllegalArgumentException("component " + d + " has " + c.size() + " samples, the blend takes " + counts[d]);
            }
            if (length >= 0 && c.sequenceLength() != length) {
                throw new IllegalArgumentException("component " + d + " has sequence length " + c.sequenceLength() + ", others " + length);
            }
            length = c.sequenceLength();
        }
        if (length < 0) {
            throw new IllegalArgumentException("a blend needs at least one component");
        }
        this.components = Collections.unmodifiableList(new ArrayList<>(components));
        this.index = index;
        this.sequenceLength = length;
    }

    /**
     * The blending index.
     *
     * @return the index
     */
    public BlendingIndex index() {
        return index;
    }

    /**
     * The component datasets.
     *
     * @return an unmodifiable list (entries may be null for unused components)
     */
    public List<SampleDataset> components() {
        return components;
    }

    @Override
    public long size() {
        return index.size();
    }

    @Override
    public int sequenceLength() {
        return sequenceLength;
    }

    @Override
    public void sample(long i, int[] destination) {
        components.get(index.datasetIndex(i)).sample(index.datasetSampleIndex(i), destination);
    }
}
