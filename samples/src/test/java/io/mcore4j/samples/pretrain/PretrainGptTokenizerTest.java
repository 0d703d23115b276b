package io.mcore4j.samples.pretrain;

import static io.mcore4j.samples.pretrain.PretrainRuns.refusal;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.mcore4j.data.preprocess.Preprocess;
import io.mcore4j.data.preprocess.PreprocessOptions;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.OptionalInt;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * pretrain-gpt with Megatron's tokenizer flags: the vocabulary (then padded to --make-vocab-size-divisible-by x TP)
 * and the end-of-document id come from the tokenizer, a run on data preprocessed with each tokenizer type reaches
 * its first iteration, and inconsistent flags are refused with one line and exit code 2.
 */
class PretrainGptTokenizerTest {
    /** The fixtures of scripts/tokenizer-fixtures/generate.py (data's test resources): 400 ids, eod 0. */
    static final Path FIXTURES = Path.of("..", "data", "src", "test", "resources", "io", "mcore4j", "data", "tokenizer");
    static final String VOCAB = FIXTURES.resolve("gpt2-vocab.json").toString();
    static final String MERGES = FIXTURES.resolve("gpt2-merges.txt").toString();
    static final String TOKENIZER_JSON = FIXTURES.resolve("tokenizer.json").toString();

    @TempDir
    Path dir;

    private static PretrainArgs parse(String... flags) {
        List<String> all = new ArrayList<>(List.of("--mock-data", "--num-layers", "1", "--hidden-size", "16",
                "--num-attention-heads", "2", "--seq-length", "8"));
        all.addAll(List.of(flags));
        return PretrainArgs.parse(all.toArray(String[]::new));
    }

    @Test
    void theVocabularyAndTheEndOfDocumentComeFromTheTokenizer() {
        PretrainArgs gpt2 = parse("--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", VOCAB, "--merge-file", MERGES);
        assertEquals(512, gpt2.setup().model().vocabSize(), "400 padded to a multiple of 128");
        assertEquals(400, gpt2.tokenVocabSize());
        assertEquals(OptionalInt.of(0), gpt2.endOfDocument());

        PretrainArgs hf = parse("--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", TOKENIZER_JSON,
                "--make-vocab-size-divisible-by", "64", "--tensor-model-parallel-size", "2");
        assertEquals(512, hf.setup().model().vocabSize(), "400 padded to a multiple of 64 x TP2");
        assertEquals(400, hf.tokenVocabSize());
        assertEquals(OptionalInt.of(0), hf.endOfDocument());

        // Megatron's NullTokenizer: --vocab-size ids, then the end-of-document id
        PretrainArgs nul = parse("--tokenizer-type", "NullTokenizer", "--vocab-size", "1000");
        assertEquals(1001, nul.tokenVocabSize());
        assertEquals(1024, nul.setup().model().vocabSize());
        assertEquals(OptionalInt.of(1000), nul.endOfDocument());

        PretrainArgs bytes = parse("--tokenizer-type", "ByteLevel", "--vocab-size", "257");
        assertEquals(257, bytes.tokenVocabSize());
        assertEquals(OptionalInt.of(256), bytes.endOfDocument());

        PretrainArgs none = parse("--vocab-size", "300");
        assertEquals(300, none.tokenVocabSize(), "without a tokenizer type --vocab-size is the vocabulary, as before");
        assertEquals(384, none.setup().model().vocabSize());
        assertEquals(257, parse().tokenVocabSize());
        assertEquals(OptionalInt.empty(), parse().endOfDocument());
    }


    @Test
    void inconsistentTokenizerFlagsAreRefusedOnOneLine() {
        assertEquals("pretrain-gpt: --vocab-size 300 disagrees with --tokenizer-type GPT2BPETokenizer, whose vocabulary has"
                + " 400 ids (leave --vocab-size out)", refusal("--mock-data", "--tokenizer-type", "GPT2BPETokenizer",
                "--vocab-file", VOCAB, "--merge-file", MERGES, "--vocab-size", "300"));
        assertEquals("pretrain-gpt: --tokenizer-type NullTokenizer needs --vocab-size (its ids are below it, and it is the"
                + " end-of-document id)", refusal("--mock-data", "--tokenizer-type", "NullTokenizer"));
        assertEquals("pretrain-gpt: --tokenizer-type GPT2BPETokenizer needs --merge-file path/to/merges.txt",
                refusal("--mock-data", "--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", VOCAB));
        assertEquals("pretrain-gpt: --vocab-file /no/such/vocab.json does not exist", refusal("--mock-data",
                "--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", "/no/such/vocab.json", "--merge-file", MERGES));
        assertEquals("pretrain-gpt: --tokenizer-model " + Path.of("/no/such/tokenizer.json") + " does not exist",
                refusal("--mock-data", "--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", "/no/such/tokenizer.json"));
        assertEquals("pretrain-gpt: --corpus-from-sources builds a byte-level corpus; it takes --tokenizer-type ByteLevel or"
                + " none, not GPT2BPETokenizer", refusal("--corpus-from-sources", "..", "--tokenizer-type", "GPT2BPETokenizer",
                "--vocab-file", VOCAB, "--merge-file", MERGES));
        assertTrue(refusal("--mock-data", "--tokenizer-type", "SentencePieceTokenizer").contains(
                "--tokenizer-type SentencePieceTokenizer is unknown (expected GPT2BPETokenizer, HuggingFaceTokenizer, NullTokenizer or ByteLevel;"
                        + " for a SentencePiece or tiktoken model, HuggingFaceTokenizer reads its tokenizer.json)"));
    }

    /** Preprocesses {@code texts} (each a document, repeated) with the given tokenizer; returns the dataset prefix. */
    private String corpus(String name, PreprocessOptions.Builder options) throws IOException {
        Preprocess.run(options.appendEod(true).progress(false).build(), null);
        return dir.resolve(name + "_text_document").toString();
    }

    private Path jsonl(String name, List<String> texts) throws IOException {
        List<String> lines = new ArrayList<>();
        for (int copy = 0; copy < 8; copy++) {
            for (String t : texts) {
                lines.add("{\"text\": \"" + t + "\"}");
            }
        }
        return Files.write(dir.resolve(name + ".jsonl"), lines, StandardCharsets.UTF_8);
    }

    private String train(String prefix, String... tokenizerFlags) throws Exception {
        List<String> argv = new ArrayList<>(List.of("--num-layers", "1", "--hidden-size", "16", "--num-attention-heads", "2",
                "--seq-length", "16", "--micro-batch-size", "2", "--global-batch-size", "2", "--train-iters", "1",
                "--log-interval", "1", "--data-path", prefix, "--split", "100,0,0",
                "--metrics-dir", dir.resolve("metrics-" + System.nanoTime()).toString()));
        argv.addAll(List.of(tokenizerFlags));
        ByteArrayOutputStream console = new ByteArrayOutputStream();
        List<Double> losses = PretrainGpt.run(PretrainArgs.parse(argv.toArray(String[]::new)),
                new PrintStream(console, true, StandardCharsets.UTF_8));
        assertEquals(1, losses.size());
        assertTrue(Double.isFinite(losses.get(0)) && losses.get(0) > 0, losses.toString());
        return console.toString(StandardCharsets.UTF_8);
    }

    @Test
    void aRunOnDataOfEachTokenizerTypeReachesItsFirstIteration() throws Exception {
        List<String> texts = List.of("Hello, world! This is mcore4j, Megatron-Core for the JVM.",
                "Tensor parallelism splits the linear layers over ranks.", "The loss falls as the model learns.");
        Path text = jsonl("text", texts);
        String gpt2 = corpus("gpt2", PreprocessOptions.builder(text, dir.resolve("gpt2"), PreprocessOptions.TokenizerType.GPT2_BPE)
                .gpt2Files(Path.of(VOCAB), Path.of(MERGES)));
        String out = train(gpt2, "--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", VOCAB, "--merge-file", MERGES);
        assertTrue(out.contains("> building GPT2BPETokenizer tokenizer ...\n > padded vocab (size: 400) with 112 dummy tokens"
                + " (new size: 512)"), out);

        String hf = corpus("hf", PreprocessOptions.builder(text, dir.resolve("hf"), PreprocessOptions.TokenizerType.HUGGING_FACE)
                .tokenizerModel(Path.of(TOKENIZER_JSON)));
        out = train(hf, "--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", TOKENIZER_JSON);
        assertTrue(out.contains(" > padded vocab (size: 400) with 112 dummy tokens (new size: 512)"), out);

        Path ids = jsonl("ids", List.of("1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19", "299 0 299 0 299 0 299 0 299 0 299"));
        String nul = corpus("null", PreprocessOptions.builder(ids, dir.resolve("null"), PreprocessOptions.TokenizerType.NULL)
                .vocabSize(300));
        out = train(nul, "--tokenizer-type", "NullTokenizer", "--vocab-size", "300");
        assertTrue(out.contains(" > padded vocab (size: 301) with 83 dummy tokens (new size: 384)"), out);
    }
}
