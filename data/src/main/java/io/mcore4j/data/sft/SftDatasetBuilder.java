package io.mcore4j.data.sft;

import io.mcore4j.data.chat.ChatTemplate;
import io.mcore4j.data.gpt.DatasetSplit;
import io.mcore4j.data.gpt.DocumentRange;
import io.mcore4j.data.gpt.GptSplits;
import io.mcore4j.data.gpt.SampleDataset;
import io.mcore4j.data.gpt.SplitWeights;
import io.mcore4j.data.preprocess.HuggingFaceTokenizerAdapter;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.EnumMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Objects;
import java.util.function.Consumer;

/**
 * Builds the train, validation and test datasets of supervised fine-tuning from a JSON Lines file: tokenized with
 * a Hugging Face tokenizer and its chat template (or another template), cached ({@link SftCorpus}), and cut into
 * contiguous splits of conversations by the split weights as Megatron cuts a dataset's documents
 * ({@link SplitWeights#range}). Samples are read in file order within a split, as Megatron's SFT dataset reads
 * them (a shuffled order is the sampler's business: {@code --dataloader-type cyclic}): one conversation per sample
 * ({@link SftDataset}), or with {@link #packing} whole conversations packed into each sample ({@link PackedSftDataset}).
 * Building a split logs one line, {@code sft <split>: <N> conversations in <M> samples of <L> positions, <P>% of them
 * conversation tokens}, P being the share of the samples' positions whose input and label are both tokens of a
 * conversation (not padding).
 */
public final class SftDatasetBuilder {
    private Path input;
    private Path tokenizer;
    private String eodToken;
    private Path chatTemplate;
    private Path cacheDirectory;
    private int sequenceLength;
    private SplitWeights split = SplitWeights.DEFAULT;
    private long vocabSize;
    private boolean packing;
    private int multiple = 1;
    private Consumer<String> log = line -> {};

    private SftDatasetBuilder() {}

    /** @return a builder with Megatron's default split */
    public static SftDatasetBuilder create() {
        return new SftDatasetBuilder();
    }

    /**
     * @param jsonl the JSON Lines file, one chat or prompt/completion pair per line
     * @return this
     */
    public SftDatasetBuilder input(Path jsonl) {
        this.input = jsonl;
        return this;
    }

    /**
     * @param tokenizerModel a Hugging Face tokenizer directory or its {@code tokenizer.json}
     * @param eodToken the end-of-document token's text, or null for the tokenizer's {@code eos_token}
     * @return this
     */
    public SftDatasetBuilder tokenizer(Path tokenizerModel, String eodToken) {
        this.tokenizer = tokenizerModel;
        this.eodToken = eodToken;
        return this;
    }

    /**
     * @param file a Jinja file to use instead of the tokenizer's chat template, or null
     * @return this
     */
    public SftDatasetBuilder chatTemplate(Path file) {
        this.chatTemplate = file;
        return this;
    }

    /**
     * @param directory where the tokenized conversations are cached, or null for the input's directory
     * @return this
     */
    public SftDatasetBuilder cacheDirectory(Path directory) {
        this.cacheDirectory = directory;
        return this;
    }

    /**
     * @param tokens tokens the model sees per sample
     * @return this
     */
    public SftDatasetBuilder sequenceLength(int tokens) {
        this.sequenceLength = tokens;
        return this;
    }

    /**
     * @param size the model's vocabulary: every token id must be below it (0: not checked)
     * @return this
     */
    public SftDatasetBuilder vocabSize(long size) {
        this.vocabSize = size;
        return this;
    }

    /**
     * @param packed pack whole conversations into each sample ({@link PackedSftDataset}) instead of one per sample
     * @return this
     */
    public SftDatasetBuilder packing(boolean packed) {
        this.packing = packed;
        return this;
    }

    /**
     * @param positions with {@link #packing}, every conversation's positions are rounded up to a multiple of this
     *                  (2·CP under context parallelism: each conversation is then split per sequence); it must divide
     *                  the sequence length. Default 1
     * @return this
     */
    public SftDatasetBuilder padToMultipleOf(int positions) {
        if (positions < 1) {
            throw new IllegalArgumentException("a multiple of " + positions + " positions: it must be at least 1");
        }
        this.multiple = positions;
        return this;
    }

    /**
     * @param weights train, validation and test weights
     * @return this
     */
    public SftDatasetBuilder split(SplitWeights weights) {
        this.split = Objects.requireNonNull(weights, "weights");
        return this;
    }

    /**
     * @param lines where progress lines go
     * @return this
     */
    public SftDatasetBuilder log(Consumer<String> lines) {
        this.log = Objects.requireNonNull(lines, "lines");
        return this;
    }

    /**
     * @return the splits that have conversations; they own the cache's readers
     * @throws IOException if a file cannot be read or written
     * @throws IllegalArgumentException for a bad line (file:line[:column]), a template that cannot render a
     *     conversation, or a tokenizer without a chat template
     * @throws io.mcore4j.data.indexed.CorruptDatasetException if a token id is not below the vocabulary size
     */
    public GptSplits build() throws IOException {
        Objects.requireNonNull(input, "input");
        Objects.requireNonNull(tokenizer, "tokenizer");
        if (sequenceLength < 1) {
            throw new IllegalArgumentException("sequence length " + sequenceLength + " must be at least 1");
        }
        if (packing && sequenceLength % multiple != 0) {
            throw new IllegalArgumentException("sequence length " + sequenceLength + " is not a multiple of the "
                    + multiple + " positions each packed conversation is padded to");
        }
        ChatTemplate template = ChatTemplate.load(tokenizer, chatTemplate);
        Path tokenizerJson = Files.isDirectory(tokenizer) ? tokenizer.resolve("tokenizer.json") : tokenizer;
        Path cache = cacheDirectory != null ? cacheDirectory : input.toAbsolutePath().getParent();
        SftCorpus corpus;
        int padId;
        try (HuggingFaceTokenizerAdapter tok = HuggingFaceTokenizerAdapter.load(tokenizer, eodToken)) {
            corpus = SftCorpus.open(input, tokenizerJson, template, tok, cache, log).corpus();
            padId = padId(template, tok);
        }
        if (vocabSize > 0) {
            try {
                corpus.tokens().checkTokenIds(vocabSize); // a row the embedding lacks would train silently at TP > 1
            } catch (RuntimeException e) {
                corpus.close();
                throw e;
            }
        }
        Map<DatasetSplit, SampleDataset> datasets = new EnumMap<>(DatasetSplit.class);
        StringBuilder sizes = new StringBuilder();
        List<String> shares = new ArrayList<>();
        for (DatasetSplit s : DatasetSplit.values()) {
            DocumentRange range = split.range(s, corpus.size());
            long count = range.end() - range.start();
            String name = s.name().toLowerCase(Locale.ROOT);
            sizes.append(sizes.length() == 0 ? "" : ", ").append(name).append(' ').append(count);
            if (count > 0) {
                SampleDataset d;
                try {
                    d = packing ? new PackedSftDataset(corpus, range.start(), count, sequenceLength, padId, multiple)
                            : new SftDataset(corpus, range.start(), count, sequenceLength, padId);
                } catch (RuntimeException e) {
                    corpus.close();
                    throw e;
                }
                datasets.put(s, d);
                shares.add(String.format(Locale.ROOT, "sft %s: %d conversations in %d samples of %d positions, %.1f%% of them"
                        + " conversation tokens", name, count, d.size(), sequenceLength,
                        100.0 * conversationPositions(corpus, range) / ((double) d.size() * sequenceLength)));
            }
        }
        log.accept(" > " + corpus.size() + " conversations (" + sizes + ")" + cut(corpus));
        shares.forEach(log);
        return GptSplits.of(datasets, corpus.readers());
    }

    /** The positions whose input and label are both a conversation's tokens: {@code min(n - 1, seq)} per conversation. */
    private long conversationPositions(SftCorpus corpus, DocumentRange range) {
        long total = 0;
        for (long c = range.start(); c < range.end(); c++) {
            total += Math.min(Math.max(corpus.tokens().documentLength(c) - 1, 0), sequenceLength);
        }
        return total;
    }

    /** The tokenizer's pad token, else its eos token, else its end of document, else 0: ids no loss is taken on. */
    private static int padId(ChatTemplate template, HuggingFaceTokenizerAdapter tokenizer) {
        for (String name : new String[] {"pad_token", "eos_token"}) {
            if (template.specialTokens().get(name) instanceof String text) {
                int[] ids = tokenizer.encodeWithSpans(text, false).ids();
                if (ids.length == 1) {
                    return ids[0];
                }
            }
        }
        return tokenizer.endOfDocument().orElse(0);
    }

    /** How many conversations are longer than a sample, and how many of those lose every trained token. */
    private String cut(SftCorpus corpus) {
        long longer = 0;
        long lost = 0;
        int[] mask = new int[sequenceLength + 1];
        for (long c = 0; c < corpus.size(); c++) {
            if (corpus.tokens().documentLength(c) > sequenceLength + 1L) {
                longer++;
                corpus.lossMask().readDocument(c, 0, sequenceLength + 1, mask, 0);
                boolean any = false;
                for (int t = 1; t <= sequenceLength && !any; t++) {
                    any = mask[t] != 0;
                }
                lost += any ? 0 : 1;
            }
        }
        return longer == 0 ? "" : "; " + longer + " longer than " + (sequenceLength + 1) + " tokens are cut" + (lost == 0 ? ""
                : ", " + lost + " of them before any assistant token (they add nothing to the loss)");
    }
}
