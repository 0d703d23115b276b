package io.mcore4j.data.bench;

import io.mcore4j.data.preprocess.Preprocess;
import io.mcore4j.data.preprocess.PreprocessOptions;
import io.mcore4j.data.preprocess.PreprocessResult;

import java.io.BufferedWriter;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Random;

/**
 * Preprocessing throughput: generates a JSON Lines corpus of English-like text (100 MB by default), then
 * runs {@code preprocess} with the byte-level tokenizer and with a generated WordLevel HuggingFace
 * tokenizer for each worker count, printing MB/s overall and per worker.
 *
 * <pre>
 * java -cp ... io.mcore4j.data.bench.PreprocessBenchmark [megabytes=100] [workers=1,2] [directory]
 * </pre>
 */
public final class PreprocessBenchmark {
    private PreprocessBenchmark() {}

    /**
     * Runs the benchmark.
     *
     * @param args optional corpus size in MB, comma-separated worker counts, and a working directory
     * @throws IOException if the files cannot be written
     */
    public static void main(String[] args) throws IOException {
        int megabytes = args.length > 0 ? Integer.parseInt(args[0]) : 100;
        int[] workerCounts = java.util.Arrays.stream((args.length > 1 ? args[1] : "1,2").split(",")).mapToInt(Integer::parseInt).toArray();
        Path dir = args.length > 2 ? Path.of(args[2]) : Files.createTempDirectory("mcore4j-preprocess-bench");
        List<String> words = words(2000);
        Path input = dir.resolve("corpus.jsonl");
        long bytes = generate(input, words, megabytes * 1_000_000L);
        Path tokenizer = wordLevelTokenizer(dir.resolve("tokenizer.json"), words);
        System.out.printf(Locale.ROOT, "corpus: %s, %.1f MB, %d cores%n", input, bytes / 1e6, Runtime.getRuntime().availableProcessors());
        for (String type : List.of("ByteLevel", "HuggingFaceTokenizer")) {
            for (int workers : workerCounts) {
                PreprocessOptions.Builder options = PreprocessOptions.builder(input, dir.resolve("out"),
                        PreprocessOptions.TokenizerType.fromArgument(type)).appendEod(true).workers(workers).progress(false);
                if (type.equals("HuggingFaceTokenizer")) {
                    options.tokenizerModel(tokenizer);
                }
                PreprocessResult r = Preprocess.run(options.build(), null);
                System.out.printf(Locale.ROOT, "%-20s workers=%d: %,d docs, %,d tokens, %.2f s, %.1f MB/s, %.1f MB/s per worker, %,.0f docs/s%n",
                        type, workers, r.documents(), r.tokens(), r.seconds(), r.megabytesPerSecond(),
                        r.megabytesPerSecond() / workers, r.documents() / r.seconds());
            }
        }
    }

    private static List<String> words(int count) {
        Random random = new Random(1);
        List<String> words = new ArrayList<>();
        while (words.size() < count) {
            StringBuilder w = new StringBuilder();
            int length = 2 + random.nextInt(8);
            for (int k = 0; k < length; k++) {
                w.append((char) ('a' + random.nextInt(26)));
            }
            if (!words.contains(w.toString())) {
                words.add(w.toString());
            }
        }
        return words;
    }

    private static long generate(Path file, List<String> words, long targetBytes) throws IOException {
        Random random = new Random(2);
        long written = 0;
        try (BufferedWriter out = Files.newBufferedWriter(file, StandardCharsets.UTF_8)) {
            StringBuilder line = new StringBuilder();
            for (long id = 0; written < targetBytes; id++) {
                line.setLength(0);
                line.append("{\"id\": ").append(id).append(", \"text\": \"");
                int sentences = 5 + random.nextInt(40);
                for (int s = 0; s < sentences; s++) {
                    int n = 5 + random.nextInt(20);
                    for (int k = 0; k < n; k++) {
                        // Zipf-like: frequent words are short ids near the front
                        int index = (int) Math.min(words.size() - 1, Math.abs(random.nextGaussian()) * words.size() / 4);
                        line.append(words.get(index)).append(k == n - 1 ? ". " : " ");
                    }
                    if (random.nextInt(10) == 0) {
                        line.append("\\n");
                    }
                }
                line.append("\"}\n");
                out.append(line);
                written += line.length();
            }
        }
        return Files.size(file);
    }

    private static Path wordLevelTokenizer(Path file, List<String> words) throws IOException {
        StringBuilder vocab = new StringBuilder("\"[UNK]\": 0, \".\": 1, \"<|endoftext|>\": 2");
        for (int k = 0; k < words.size(); k++) {
            vocab.append(", \"").append(words.get(k)).append("\": ").append(k + 3);
        }
        Files.writeString(file, "{\"version\": \"1.0\", \"truncation\": null, \"padding\": null, \"added_tokens\": ["
                + "{\"id\": 2, \"content\": \"<|endoftext|>\", \"single_word\": false, \"lstrip\": false, \"rstrip\": false,"
                + " \"normalized\": false, \"special\": true}], \"normalizer\": null, \"pre_tokenizer\": {\"type\": \"Whitespace\"},"
                + " \"post_processor\": null, \"decoder\": null, \"model\": {\"type\": \"WordLevel\", \"unk_token\": \"[UNK]\", \"vocab\": {"
                + vocab + "}}}", StandardCharsets.UTF_8);
        return file;
    }
}
