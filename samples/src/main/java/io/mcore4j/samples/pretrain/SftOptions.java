package io.mcore4j.samples.pretrain;

import io.mcore4j.data.chat.ChatTemplate;
import io.mcore4j.data.gpt.GptSplits;
import io.mcore4j.data.preprocess.PreprocessOptions;
import io.mcore4j.data.sft.SftDatasetBuilder;
import picocli.CommandLine.Option;

import java.io.IOException;
import java.io.PrintStream;
import java.nio.file.Files;
import java.nio.file.Path;

/**
 * The supervised fine-tuning flags of {@code pretrain-gpt}, as a picocli mixin: Megatron-LM's {@code --sft}, with
 * the data a JSON Lines file of chats or prompt/completion pairs rendered by the model's Hugging Face chat template
 * (mcore4j's {@code --chat-template} replaces it) instead of Megatron's own prompt formats. Validation raises
 * {@link IllegalArgumentException} with one line naming the flag.
 */
public final class SftOptions {
    @Option(names = "--sft", description = "Supervised fine-tuning (Megatron-LM's flag): --data-path is one JSON Lines"
            + " file of chats ({\"messages\": [{\"role\", \"content\"}, ...], optional \"tools\") or prompt/completion"
            + " pairs, rendered by the chat template of --tokenizer-model (--tokenizer-type HuggingFaceTokenizer) and"
            + " tokenized once (cached beside the file, or in --data-cache-path); the loss is taken on the assistant's"
            + " tokens (the completion's) only. One conversation per sample, cut to --seq-length or padded (--packing: several).")
    boolean enabled;

    @Option(names = "--packing", description = "With --sft: pack whole conversations into each sample of --seq-length"
            + " positions (first-fit decreasing; each conversation attends only to itself and its positions restart),"
            + " as Megatron Bridge's packed sequences, instead of one conversation per sample padded to it.")
    boolean packing;

    @Option(names = "--chat-template", paramLabel = "FILE", description = "With --sft: a Jinja chat template to use"
            + " instead of the tokenizer's (a training template with {%% generation %%} blocks, say).")
    Path chatTemplate;

    /**
     * Checks the flags that go with {@code --sft}, and that the tokenizer has a chat template.
     *
     * @param a the flags
     * @throws IllegalArgumentException naming the flag
     */
    void check(PretrainArgs a) {
        if (!enabled) {
            if (packing) {
                throw new IllegalArgumentException("--packing needs --sft: it packs the conversations of a --sft --data-path"
                        + " (pretraining documents are separated with --reset-attention-mask)");
            }
            if (chatTemplate != null) {
                throw new IllegalArgumentException("--chat-template " + chatTemplate + " needs --sft");
            }
            return;
        }
        if (a.tokenizer.type() != PreprocessOptions.TokenizerType.HUGGING_FACE || a.tokenizer.spec(0).tokenizerModel() == null) {
            throw new IllegalArgumentException("--sft needs --tokenizer-type HuggingFaceTokenizer and --tokenizer-model"
                    + " (the model's tokenizer directory, whose chat template renders the conversations)");
        }
        if (a.mockData || a.corpus != null) {
            throw new IllegalArgumentException("--sft trains on the conversations of --data-path, not on "
                    + (a.mockData ? "--mock-data" : "--corpus-from-sources"));
        }
        if (a.dataPath.size() != 1) {
            throw new IllegalArgumentException("--sft needs --data-path with one JSON Lines file of conversations (got "
                    + (a.dataPath.isEmpty() ? "none" : String.join(" ", a.dataPath)) + ")");
        }
        Path data = Path.of(a.dataPath.get(0));
        if (!Files.isRegularFile(data)) {
            throw new IllegalArgumentException("--data-path " + data + (Files.exists(data) ? " is not a file" : " does not exist")
                    + "; with --sft, a JSON Lines file of conversations");
        }
        if (chatTemplate != null && !Files.isRegularFile(chatTemplate)) {
            throw new IllegalArgumentException("--chat-template " + chatTemplate + " is not a file");
        }
        try {
            ChatTemplate.load(a.tokenizer.spec(0).tokenizerModel(), chatTemplate);
        } catch (IOException e) {
            throw new IllegalArgumentException("--tokenizer-model " + a.tokenizer.spec(0).tokenizerModel() + ": cannot read " + e.getMessage(), e);
        } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException("--tokenizer-model " + a.tokenizer.spec(0).tokenizerModel() + ": " + e.getMessage()
                    + " (give one with --chat-template FILE)", e);
        }
    }

    /** @return whether the samples are rows of packed conversations ({@code --sft --packing}) */
    boolean packs() {
        return enabled && packing;
    }

    /**
     * Tokenizes (or reuses the cache of) the conversations and splits them.
     *
     * @param a the checked flags
     * @param out where progress lines go
     * @return the splits
     * @throws IOException if a file cannot be read or written
     * @throws IllegalArgumentException for a bad line, or evaluation asked of a split without conversations
     */
    GptSplits datasets(PretrainArgs a, PrintStream out) throws IOException {
        out.println("> building the SFT datasets of " + a.dataPath.get(0) + " with the chat template of "
                + (chatTemplate != null ? chatTemplate : a.tokenizer.spec(0).tokenizerModel()) + " ...");
        GptSplits splits = SftDatasetBuilder.create().input(Path.of(a.dataPath.get(0)))
                .tokenizer(a.tokenizer.spec(0).tokenizerModel(), a.tokenizer.spec(0).eodToken()).chatTemplate(chatTemplate)
                .cacheDirectory(a.dataCachePath).sequenceLength(a.seqLength).split(a.splitWeights()).packing(packing)
                // under context parallelism each conversation is split per sequence: 2·CP chunks of equal length
                .padToMultipleOf(a.contextParallel > 1 ? 2 * a.contextParallel : 1)
                .vocabSize(a.tokenVocabSize()).log(out::println).build();
        if (a.evalInterval > 0 && splits.valid().isEmpty()) {
            splits.close();
            throw new IllegalArgumentException("--eval-interval " + a.evalInterval + " asks for evaluation but --split "
                    + a.split + " leaves the validation set none of the conversations of " + a.dataPath.get(0)
                    + " (more conversations, a larger validation weight, or --eval-interval 0)");
        }
        return splits;
    }
}
