package io.mcore4j.data.gpt;

import io.mcore4j.data.indexed.IndexedDatasetReader;

import java.io.IOException;
import java.util.EnumMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;

/**
 * The train, valid and test datasets built by {@link GptDatasetBuilder}, together with the readers they
 * sample from. This object owns those readers: {@link #close()} closes them, after which the datasets must
 * no longer be used.
 */
public final class GptSplits implements AutoCloseable {
    private final Map<DatasetSplit, SampleDataset> datasets;
    private final List<IndexedDatasetReader> readers;

    GptSplits(Map<DatasetSplit, SampleDataset> datasets, List<IndexedDatasetReader> readers) {
        this.datasets = new EnumMap<>(DatasetSplit.class);
        this.datasets.putAll(datasets);
        this.readers = List.copyOf(readers);
    }

    /**
     * The dataset of one split.
     *
     * @param split which split
     * @return the dataset, or empty if no samples were requested for it
     */
    public Optional<SampleDataset> get(DatasetSplit split) {
        return Optional.ofNullable(datasets.get(split));
    }

    /**
     * The training dataset.
     *
     * @return the dataset, or empty if no training samples were requested
     */
    public Optional<SampleDataset> train() {
        return get(DatasetSplit.TRAIN);
    }

    /**
     * The validation dataset.
     *
     * @return the dataset, or empty if no validation samples were requested
     */
    public Optional<SampleDataset> valid() {
        return get(DatasetSplit.VALID);
    }

    /**
     * The test dataset.
     *
     * @return the dataset, or empty if no test samples were requested
     */
    public Optional<SampleDataset> test() {
        return get(DatasetSplit.TEST);
    }

    /**
     * Splits built elsewhere (the supervised fine-tuning datasets), owning the readers they sample from.
     *
     * @param datasets the dataset of each split that has one
     * @param readers closed by {@link #close()}
     * @return the splits
     */
    public static GptSplits of(Map<DatasetSplit, SampleDataset> datasets, List<IndexedDatasetReader> readers) {
        return new GptSplits(datasets, readers);
    }

    @Override
    public void close() throws IOException {
        IOException first = null;
        for (IndexedDatasetReader reader : readers) {
            try {
                reader.close();
            } catch (IOException e) {
                if (first == null) {
                    first = e;
                } else {
                    first.addSuppressed(e);
                }
            }
        }
        if (first != null) {
            throw first;
        }
    }
}
