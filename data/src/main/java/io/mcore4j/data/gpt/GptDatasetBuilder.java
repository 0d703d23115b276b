package io.mcore4j.data.gpt;

import io.mcore4j.data.indexed.IndexedDatasetReader;

import java.io.IOException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.EnumMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Objects;

/**
 * Builds the train/valid/test GPT datasets of a training run from Megatron-style arguments: a data blend
 * (or a mock vocabulary), the sequence length, the seed, the split and the number of samples each split
 * must provide.
 *
 * <p>Datasets are built as Megatron-Core's {@code BlendedMegatronDatasetBuilder} builds them, so that the
 * same data and flags give the same samples in the same order: each dataset of the blend is split by
 * sequence ({@link SplitWeights}); a split of weight 0 gets no dataset. For each split with samples
 * requested, a single dataset is used directly; in a blend of normalized weights {@code w}, dataset
 * {@code d} contributes {@code ceil(n * w_d)} samples to a blend of their sum, and its {@link GptDataset} is
 * built for {@code ceil(ceil(n * w_d) * (1 + surplus))} samples ({@link #midLevelDatasetSurplus}). Index arrays are cached next to each dataset's files (the blending index next to the first
 * dataset's), or all in {@link #cacheDirectory(Path)};
 * with {@link #cache(boolean) cache(false)} they are built in memory. Mock data gives every split a
 * {@link MockGptDataset} seeded by seed and split.
 *
 * <pre>{@code
 * try (GptSplits splits = GptDatasetBuilder.create()
 *         .dataPath("0.7 data/a_text_document 0.3 data/b_text_document")
 *         .sequenceLength(1024).seed(1234).split("969,30,1")
 *         .samples(trainSamples, validSamples, testSamples)
 *         .build()) {
 *     SampleDataset train = splits.train().orElseThrow();
 *     int[] sample = train.sample(0); // 1025 token ids
 * }
 * }</pre>
 */
public final class GptDatasetBuilder {
    private DataBlend blend;
    private int mockVocabularySize;
    private long vocabularySize;
    private int sequenceLength;
    private long seed = 1234;
    private SplitWeights split = SplitWeights.DEFAULT;
    private final long[] samples = new long[3];
    private Path cacheDirectory;
    private boolean cache = true;
    private double midLevelDatasetSurplus = 0.005;
    private IndexedDatasetReader.Options readerOptions = IndexedDatasetReader.Options.DEFAULT;

    private GptDatasetBuilder() {}

    /**
     * Starts a builder (seed 1234, split 969,30,1, caching on, no samples requested).
     *
     * @return a new builder
     */
    public static GptDatasetBuilder create() {
        return new GptDatasetBuilder();
    }

    /**
     * Uses indexed datasets on disk.
     *
     * @param blend prefixes and weights
     * @return this builder
     */
    public GptDatasetBuilder blend(DataBlend blend) {
        this.blend = blend;
        this.mockVocabularySize = 0;
        return this;
    }

    /**
     * Uses indexed datasets given as a {@code --data-path} value.
     *
     * @param dataPath e.g. {@code "0.7 a 0.3 b"} or {@code "a"}
     * @return this builder
     */
    public GptDatasetBuilder dataPath(String dataPath) {
        return blend(DataBlend.parse(dataPath));
    }

    /**
     * Uses synthetic data instead of files.
     *
     * @param vocabularySize token ids are drawn from {@code [0, vocabularySize)}
     * @return this builder
     */
    public GptDatasetBuilder mock(int vocabularySize) {
        if (vocabularySize <= 0) {
            throw new IllegalArgumentException("mock vocabulary size " + vocabularySize + " must be positive");
        }
        this.mockVocabularySize = vocabularySize;
        this.blend = null;
        return this;
    }

    /**
     * Checks at {@link #build()} that every token id of every dataset of the blend lies in
     * {@code [0, vocabularySize)} ({@link IndexedDatasetReader#checkTokenIds}: one pass over each
     * memory-mapped {@code .bin}), so data made for another tokenizer fails before training instead of
     * training on ids the embedding has no row for. Off by default. Megatron-LM's {@code --vocab-size}.
     *
     * @param vocabularySize the model's vocabulary size, at least 1
     * @return this builder
     */
    public GptDatasetBuilder vocabSize(long vocabularySize) {
        if (vocabularySize < 1) {
            throw new IllegalArgumentException("vocabulary size " + vocabularySize + " must be at least 1");
        }
        this.vocabularySize = vocabularySize;
        return this;
    }

    /**
     * Sets the tokens per sample the model sees (samples hold one more).
     *
     * @param sequenceLength positive length
     * @return this builder
     */
    public GptDatasetBuilder sequenceLength(int sequenceLength) {
        if (sequenceLength <= 0) {
            throw new IllegalArgumentException("sequence length " + sequenceLength + " must be positive");
        }
        this.sequenceLength = sequenceLength;
        return this;
    }

    /**
     * Sets the shuffle seed.
     *
     * @param seed any value
     * @return this builder
     */
    public GptDatasetBuilder seed(long seed) {
        this.seed = seed;
        return this;
    }

    /**
     * Sets the split weights.
     *
     * @param split the weights
     * @return this builder
     */
    public GptDatasetBuilder split(SplitWeights split) {
        this.split = Objects.requireNonNull(split, "split");
        return this;
    }

    /**
     * Sets the split weights from a {@code --split} value.
     *
     * @param split e.g. {@code "969,30,1"}
     * @return this builder
     */
    public GptDatasetBuilder split(String split) {
        return split(SplitWeights.parse(split));
    }

    /**
     * Sets how many samples each split must provide; a split with 0 gets no dataset.
     *
     * @param train training samples
     * @param valid validation samples
     * @param test test samples
     * @return this builder
     */
    public GptDatasetBuilder samples(long train, long valid, long test) {
        if (train < 0 || valid < 0 || test < 0) {
            throw new IllegalArgumentException("sample counts " + train + ", " + valid + ", " + test + " must not be negative");
        }
        samples[0] = train;
        samples[1] = valid;
        samples[2] = test;
        return this;
    }

    /**
     * Puts the index cache in one directory instead of next to each dataset (for read-only data).
     *
     * @param directory the cache directory, created if missing
     * @return this builder
     */
    public GptDatasetBuilder cacheDirectory(Path directory) {
        this.cacheDirectory = directory;
        return this;
    }

    /**
     * Turns the index cache on (default) or off.
     *
     * @param enabled whether to load and store index arrays on disk
     * @return this builder
     */
    public GptDatasetBuilder cache(boolean enabled) {
        this.cache = enabled;
        return this;
    }

    /**
     * Sets the share of extra samples each component of a blend is built with beyond what the blend takes
     * from it (Megatron's {@code --mid-level-dataset-surplus}, default 0.005). It changes the components'
     * epoch counts, hence their sample order.
     *
     * @param surplus a non-negative fraction
     * @return this builder
     */
    public GptDatasetBuilder midLevelDatasetSurplus(double surplus) {
        if (!(surplus >= 0) || Double.isInfinite(surplus)) {
            throw new IllegalArgumentException("mid-level dataset surplus " + surplus + " must be finite and non-negative");
        }
        this.midLevelDatasetSurplus = surplus;
        return this;
    }

    /**
     * Sets how datasets are opened.
     *
     * @param options mapping and validation options
     * @return this builder
     */
    public GptDatasetBuilder readerOptions(IndexedDatasetReader.Options options) {
        this.readerOptions = Objects.requireNonNull(options, "options");
        return this;
    }

    /**
     * Opens the data and builds (or loads) every requested split.
     *
     * @return the splits, owning the opened readers
     * @throws IOException if a dataset cannot be opened or is corrupt
     * @throws io.mcore4j.data.indexed.CorruptDatasetException if {@link #vocabSize} was set and a token
     *     id lies outside the vocabulary (naming the file, document, position and id)
     * @throws IllegalStateException if neither data nor mock was chosen, or no sequence length was set
     * @throws IllegalArgumentException if a split of positive weight with samples requested has no sequences
     *     in some dataset
     */
    public GptSplits build() throws IOException {
        if (sequenceLength <= 0) {
            throw new IllegalStateException("set a sequence length before build()");
        }
        Map<DatasetSplit, SampleDataset> datasets = new EnumMap<>(DatasetSplit.class);
        if (mockVocabularySize > 0) {
            if (vocabularySize > 0 && mockVocabularySize > vocabularySize) {
                throw new IllegalArgumentException("mock vocabulary size " + mockVocabularySize
                        + " exceeds the vocabulary size " + vocabularySize);
            }
            for (DatasetSplit s : DatasetSplit.values()) {
                if (samples[s.ordinal()] > 0) {
                    datasets.put(s, new MockGptDataset(samples[s.ordinal()], sequenceLength, mockVocabularySize,
                            SplitMix64.mix(seed + s.ordinal())));
                }
            }
            return new GptSplits(datasets, List.of());
        }
        if (blend == null) {
            throw new IllegalStateException("choose data with blend()/dataPath() or mock() before build()");
        }
        List<IndexedDatasetReader> readers = new ArrayList<>();
        try {
            for (Path prefix : blend.prefixes()) {
                readers.add(IndexedDatasetReader.open(prefix, readerOptions));
            }
            if (vocabularySize > 0) {
                for (IndexedDatasetReader r : readers) {
                    r.checkTokenIds(vocabularySize);
                }
            }
            for (DatasetSplit s : DatasetSplit.values()) {
                long n = samples[s.ordinal()];
                if (n > 0 && split.includes(s)) {
                    datasets.put(s, buildSplit(s, n, readers));
                }
            }
            return new GptSplits(datasets, readers);
        } catch (IOException | RuntimeException e) {
            for (IndexedDatasetReader r : readers) {
                try {
                    r.close();
                } catch (IOException suppressed) {
                    e.addSuppressed(suppressed);
                }
            }
            throw e;
        }
    }

    private SampleDataset buildSplit(DatasetSplit s, long n, List<IndexedDatasetReader> readers) {
        if (readers.size() == 1) {
            return component(s, n, readers.get(0));
        }
        double[] weights = NumpySum.normalize(blend.weights().stream().mapToDouble(Double::doubleValue).toArray());
        long size = 0;
        long[] componentSamples = new long[readers.size()];
        for (int d = 0; d < readers.size(); d++) {
            double target = Math.ceil(n * weights[d]);
            size += (long) target;
            componentSamples[d] = (long) Math.ceil(target * (1 + midLevelDatasetSurplus));
        }
        BlendingIndex index = cache
                ? BlendingIndex.buildCached(weights, size, cacheDirectory(readers.get(0)))
                : BlendingIndex.build(weights, size);
        List<SampleDataset> components = new ArrayList<>();
        for (int d = 0; d < readers.size(); d++) {
            components.add(component(s, componentSamples[d], readers.get(d)));
        }
        // BlendedDataset rejects a component smaller than the samples the index takes from it
        return new BlendedDataset(components, index);
    }

    private GptDataset component(DatasetSplit s, long n, IndexedDatasetReader reader) {
        DocumentRange range = split.range(s, reader.sequenceCount());
        if (range.isEmpty()) {
            throw new IllegalArgumentException("split " + s.name().toLowerCase(Locale.ROOT) + " of " + reader.prefix()
                    + " has no sequences (split " + split + " over " + reader.sequenceCount() + " sequences) but "
                    + n + " samples were requested");
        }
        DocumentSource source = DocumentSource.of(reader);
        GptDataset.Config config = new GptDataset.Config(range, sequenceLength, n, seed);
        if (!cache) {
            return GptDataset.build(source, config);
        }
        return GptDataset.buildCached(source, config, cacheDirectory(reader), String.valueOf(reader.prefix().getFileName()));
    }

    private Path cacheDirectory(IndexedDatasetReader reader) {
        return cacheDirectory != null ? cacheDirectory : reader.prefix().toAbsolutePath().getParent();
    }
}
