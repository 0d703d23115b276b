package io.mcore4j.data.gpt;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Path;
import java.util.List;
import java.util.Optional;

/**
 * GPT pre-training samples cut from a range of documents: sample {@code i} is {@code sequenceLength + 1}
 * consecutive tokens of the documents concatenated in a seeded, per-epoch shuffled order, crossing document
 * boundaries freely, and samples are visited in a seeded shuffled order. The order is Megatron-Core's
 * {@code GPTDataset} order for the same documents, seed, sequence length and sample count (see
 * {@link GptIndices} for the arrays behind it).
 *
 * <p>The dataset holds at least the requested number of samples: whole epochs are built, so {@link #size()}
 * may be larger. The same source, range, sequence length, sample count and seed always give the same
 * samples. The dataset does not own its {@link DocumentSource}; the caller keeps it open while sampling.
 */
public final class GptDataset implements SampleDataset {
    private static final Logger LOG = LoggerFactory.getLogger(GptDataset.class);
    private static final List<String> ARRAY_NAMES = List.of("doc_idx", "sample_idx", "shuffle_idx");

    /**
     * What a GPT dataset is built from, besides its documents.
     *
     * @param range documents of the source to use
     * @param sequenceLength tokens per sample seen by the model (samples hold one more)
     * @param requestedSamples minimum number of samples
     * @param seed shuffle seed
     */
    public record Config(DocumentRange range, int sequenceLength, long requestedSamples, long seed) {
        /** Validates the values. */
        public Config {
            if (range == null) {
                throw new IllegalArgumentException("document range must not be null");
            }
            if (sequenceLength <= 0) {
                throw new IllegalArgumentException("sequence length " + sequenceLength + " must be positive");
            }
            if (requestedSamples < 0) {
                throw new IllegalArgumentException("requested samples " + requestedSamples + " must not be negative");
            }
        }
    }

    private final DocumentSource source;
    private final Config config;
    private final IndexArray documentIndex;
    private final IndexArray sampleIndex;
    private final IndexArray shuffleIndex;
    private final boolean fromCache;

    private GptDataset(DocumentSource source, Config config, List<IndexArray> arrays, boolean fromCache) {
        this.source = source;
        this.config = config;
        this.documentIndex = arrays.get(0);
        this.sampleIndex = arrays.get(1);
        this.shuffleIndex = arrays.get(2);
        this.fromCache = fromCache;
    }

    /**
     * Builds the dataset in memory, without a cache.
     *
     * @param source the documents
     * @param config range, sequence length, sample count and seed
     * @return the dataset
     * @throws IllegalArgumentException if the range is empty, holds no tokens, or needs arrays over 2^31
     */
    public static GptDataset build(DocumentSource source, Config config) {
        GptIndices indices = GptIndices.build(source, config.range(), config.sequenceLength(), config.requestedSamples(), config.seed());
        return new GptDataset(source, config, arrays(indices), false);
    }

    /**
     * Loads the dataset's index arrays from a cache directory, or builds and stores them there.
     *
     * @param source the documents
     * @param config range, sequence length, sample count and seed
     * @param cacheDirectory where the arrays live
     * @param cacheBaseName file-name prefix of the cache files (usually the data prefix's file name)
     * @return the dataset
     * @throws UncheckedIOException if freshly built arrays cannot be written
     */
    public static GptDataset buildCached(DocumentSource source, Config config, Path cacheDirectory, String cacheBaseName) {
        IndexCache cache = new IndexCache(cacheDirectory, cacheBaseName);
        String description = describe(source, config);
        Optional<List<IndexArray>> cached = cache.load(description, ARRAY_NAMES);
        if (cached.isPresent()) {
            LOG.info("loaded GPT indices for {} from {}", source, cache.file(description, "*"));
            return new GptDataset(source, config, cached.get(), true);
        }
        long start = System.nanoTime();
        GptIndices indices = GptIndices.build(source, config.range(), config.sequenceLength(), config.requestedSamples(), config.seed());
        try {
            cache.store(description, ARRAY_NAMES, List.of(indices.documentIndex, indices.sampleIndex, indices.shuffleIndex));
        } catch (IOException e) {
            throw new UncheckedIOException("cannot write GPT index cache " + cache.file(description, "*"), e);
        }
        LOG.info("built GPT indices for {} ({} samples) in {} ms", source, indices.shuffleIndex.length,
                (System.nanoTime() - start) / 1_000_000);
        return new GptDataset(source, config, arrays(indices), false);
    }

    static String describe(DocumentSource source, Config config) {
        return "mcore4j GptDataset indices v2 (Megatron-Core order)\n"
                + "source=" + source.identity() + "\n"
                + "documents=[" + config.range().start() + "," + config.range().end() + ")\n"
                + "sequenceLength=" + config.sequenceLength() + "\n"
                + "requestedSamples=" + config.requestedSamples() + "\n"
                + "seed=" + config.seed() + "\n";
    }

    private static List<IndexArray> arrays(GptIndices indices) {
        return List.of(IndexArray.of(indices.documentIndex), IndexArray.of(indices.sampleIndex), IndexArray.of(indices.shuffleIndex));
    }

    /**
     * The configuration this dataset was built with.
     *
     * @return the config
     */
    public Config config() {
        return config;
    }

    /**
     * Whether the index arrays came from the cache rather than being built by this call.
     *
     * @return true if loaded from disk
     */
    public boolean loadedFromCache() {
        return fromCache;
    }

    @Override
    public long size() {
        return shuffleIndex.length();
    }

    @Override
    public int sequenceLength() {
        return config.sequenceLength();
    }

    /**
     * The document-index entry at a position (which document the concatenation holds there); exposed for
     * inspection and tests.
     *
     * @param position position in the per-epoch shuffled document order
     * @return the document number in the source
     */
    public long documentAt(long position) {
        return documentIndex.get(position);
    }

    /**
     * Length of the per-epoch shuffled document order (epochs times documents).
     *
     * @return number of entries
     */
    public long documentIndexLength() {
        return documentIndex.length();
    }

    @Override
    public void sample(long index, int[] destination) {
        SampleDataset.checkIndex(index, size());
        int length = config.sequenceLength() + 1;
        if (destination.length < length) {
            throw new IllegalArgumentException("destination holds " + destination.length + " tokens, a sample has " + length);
        }
        long s = shuffleIndex.get(index);
        int position = sampleIndex.get(2 * s);
        int offset = sampleIndex.get(2 * s + 1);
        int written = 0;
        while (written < length) {
            long document = documentIndex.get(position);
            int available = source.documentLength(document) - offset;
            int take = Math.min(available, length - written);
            if (take > 0) {
                source.readTokens(document, offset, take, destination, written);
                written += take;
            }
            position++;
            offset = 0;
        }
    }
}
