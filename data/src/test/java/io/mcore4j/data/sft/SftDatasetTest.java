package io.mcore4j.data.sft;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.mcore4j.data.chat.ChatTemplate;
import io.mcore4j.data.chat.SftExample;
import io.mcore4j.data.chat.SftTokenizer;
import io.mcore4j.data.gpt.GptSplits;
import io.mcore4j.data.gpt.MaskedSampleDataset;
import io.mcore4j.data.gpt.SplitWeights;
import io.mcore4j.data.preprocess.HuggingFaceTokenizerAdapter;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * The SFT datasets of a JSON Lines file: Megatron's contiguous split of the conversations, samples cut or padded to
 * the sequence length with the mask shifted onto the labels (checked against SftTokenizer's tokens), the cache
 * reused by a second build and not by a build with another template, and bad lines named by file and line.
 */
class SftDatasetTest {
    static final Path QWEN2 = Path.of("src", "test", "resources", "io", "mcore4j", "data", "chat", "qwen2");

    @TempDir
    Path tmp;

    private static String chat(int k) {
        return "{\"messages\": [{\"role\": \"user\", \"content\": \"Count to " + k + ".\"}, {\"role\": \"assistant\","
                + " \"content\": \"" + "1 2 3 4 5 6 7 8 9 ".substring(0, 2 * k) + "done.\"}]}";
    }

    private GptSplits build(Path data, int seq, Path template, List<String> log) throws Exception {
        return SftDatasetBuilder.create().input(data).tokenizer(QWEN2, null).chatTemplate(template)
                .cacheDirectory(tmp.resolve("cache")).sequenceLength(seq).split(SplitWeights.parse("8,2,0"))
                .vocabSize(326).log(log::add).build();
    }

    @Test
    void splitsCutsPadsAndShiftsTheMaskOntoTheLabels() throws Exception {
        List<String> lines = new ArrayList<>();
        for (int k = 1; k <= 9; k++) {
            lines.add(chat(k));
        }
        lines.add(4, ""); // blank lines are skipped
        Path data = tmp.resolve("chats.jsonl");
        Files.write(data, lines);
        List<String> log = new ArrayList<>();
        int seq = 109; // the conversations have 104 to 120 tokens: some padded, some cut in the assistant's turn
        try (GptSplits splits = build(data, seq, null, log);
             HuggingFaceTokenizerAdapter tok = HuggingFaceTokenizerAdapter.load(QWEN2, null)) {
            MaskedSampleDataset train = (MaskedSampleDataset) splits.train().orElseThrow();
            MaskedSampleDataset valid = (MaskedSampleDataset) splits.valid().orElseThrow();
            assertEquals(7, train.size(), "round(0.8 x 9)");
            assertEquals(2, valid.size());
            assertTrue(splits.test().isEmpty());
            SftTokenizer sft = new SftTokenizer(ChatTemplate.load(QWEN2, null), tok);
            int padded = 0;
            int cut = 0;
            int trained = 0;
            for (int k = 1; k <= 9; k++) {
                MaskedSampleDataset d = k <= 7 ? train : valid;
                long index = k <= 7 ? k - 1 : k - 8;
                SftTokenizer.Tokens t = sft.tokenize(SftExample.parse(chat(k)));
                int[] sample = d.sample(index);
                int[] mask = new int[seq];
                d.lossMask(index, mask);
                for (int i = 0; i <= seq; i++) {
                    int expected = i < t.ids().length ? t.ids()[i] : padId(tok);
                    assertEquals(expected, sample[i], "conversation " + k + " token " + i);
                }
                for (int i = 0; i < seq; i++) {
                    int expected = i + 1 < Math.min(t.ids().length, seq + 1) ? t.lossMask()[i + 1] : 0;
                    assertEquals(expected, mask[i], "conversation " + k + " label " + i);
                    trained += mask[i];
                }
                padded += t.ids().length < seq + 1 ? 1 : 0;
                cut += t.ids().length > seq + 1 && t.lossMask()[seq] == 1 ? 1 : 0;
            }
            assertTrue(padded > 0 && cut > 0 && trained > 0, padded + " padded, " + cut + " cut in a turn, " + trained);
            assertTrue(log.get(0).startsWith(" > tokenized 9 conversations of "), log.toString());
            assertEquals(" > 9 conversations (train 7, valid 2, test 0); 5 longer than 110 tokens are cut", log.get(1));
        }
        List<String> again = new ArrayList<>();
        try (GptSplits splits = build(data, 64, null, again)) {
            assertTrue(again.get(0).startsWith(" > reusing the tokenized conversations"), again.toString());
            assertEquals(64, splits.train().orElseThrow().sequenceLength());
        }
        List<String> other = new ArrayList<>();
        try (GptSplits splits = build(data, 64, QWEN2.resolve("qwen3.jinja"), other)) {
            assertTrue(other.get(0).startsWith(" > tokenized 9"), "another template, another cache entry: " + other);
            assertFalse(Arrays.equals(splits.train().orElseThrow().sample(0), new int[65]));
        }
    }

    private static int padId(HuggingFaceTokenizerAdapter tok) {
        return tok.encodeWithSpans("<|endoftext|>", false).ids()[0];
    }

    @Test
    void badLinesAreNamedByFileAndLine() throws Exception {
        Path data = tmp.resolve("bad.jsonl");
        Files.write(data, List.of(chat(1), "{\"messages\": [{\"role\": \"user\", \"content\": \"no answer\"}]}"));
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> build(data, 16, null, new ArrayList<>()));
        assertEquals(data + ":2: no message with role \"assistant\": nothing to train on", e.getMessage());
        Files.write(data, List.of("{\"prompt\": \"a\", \"completion\": 3}"));
        e = assertThrows(IllegalArgumentException.class, () -> build(data, 16, null, new ArrayList<>()));
        assertEquals(data + ":1: \"prompt\" and \"completion\" must both be strings or both lists of messages", e.getMessage());
        Files.write(data, List.of());
        e = assertThrows(IllegalArgumentException.class, () -> build(data, 16, null, new ArrayList<>()));
        assertEquals(data + " holds no conversation (one JSON object per line)", e.getMessage());
        assertFalse(Files.list(tmp.resolve("cache")).anyMatch(p -> p.getFileName().toString().contains("bad")),
                "a failed build leaves no cache entry");
    }
}
