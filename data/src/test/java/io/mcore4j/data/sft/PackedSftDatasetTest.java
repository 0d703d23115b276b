package io.mcore4j.data.sft;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.mcore4j.data.chat.ChatTemplate;
import io.mcore4j.data.chat.SftExample;
import io.mcore4j.data.chat.SftTokenizer;
import io.mcore4j.data.gpt.GptSplits;
import io.mcore4j.data.gpt.SplitWeights;
import io.mcore4j.data.preprocess.HuggingFaceTokenizerAdapter;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

/**
 * Conversations of the tiny Qwen2 tokenizer packed into rows: every conversation is in exactly one row, its inputs,
 * labels and loss mask those of SftTokenizer's tokens shifted within it (cut as an unpacked sample cuts it, padded to
 * the multiple asked for), the rest padding of loss mask 0, the sequence lengths the row's layout; fewer samples than
 * conversations and a larger share of conversation tokens in the log line than one conversation per sample.
 */
class PackedSftDatasetTest {
    @TempDir
    Path tmp;

    /** A conversation of about 20 + 3 x words tokens. */
    static String chat(int k, int words) {
        return "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\","
                + " \"content\": \"Question " + k + ".\"}, {\"role\": \"assistant\","
                + " \"content\": \"" + "ok ".repeat(words) + "done.\"}]}";
    }

    private static final int[] WORDS = {3, 40, 12, 1, 25, 90, 8, 30, 2, 18, 50, 5};

    private GptSplits build(Path data, int seq, boolean packing, int multiple, List<String> log) throws Exception {
        return SftDatasetBuilder.create().input(data).tokenizer(SftDatasetTest.QWEN2, null)
                .cacheDirectory(tmp.resolve("cache")).sequenceLength(seq).split(SplitWeights.parse("1,0,0"))
                .packing(packing).padToMultipleOf(multiple).vocabSize(326).log(log::add).build();
    }

    @ParameterizedTest
    @ValueSource(ints = {1, 4})
    void everyConversationIsInOneRowShiftedWithinItself(int multiple) throws Exception {
        List<String> lines = new ArrayList<>();
        for (int k = 0; k < WORDS.length; k++) {
            lines.add(chat(k, WORDS[k]));
        }
        Path data = tmp.resolve("chats.jsonl");
        Files.write(data, lines);
        int seq = 256; // the longest conversation is cut
        List<String> log = new ArrayList<>();
        try (GptSplits splits = build(data, seq, true, multiple, log);
             HuggingFaceTokenizerAdapter tok = HuggingFaceTokenizerAdapter.load(SftDatasetTest.QWEN2, null)) {
            PackedSftDataset packed = (PackedSftDataset) splits.train().orElseThrow();
            SftTokenizer sft = new SftTokenizer(ChatTemplate.load(SftDatasetTest.QWEN2, null), tok);
            int pad = tok.encodeWithSpans("<|endoftext|>", false).ids()[0];
            int[] seen = new int[WORDS.length];
            long trained = 0;
            int cut = 0;
            for (long row = 0; row < packed.size(); row++) {
                int[] inputs = packed.sample(row);
                int[] labels = new int[seq];
                int[] mask = new int[seq];
                packed.labels(row, labels);
                packed.lossMask(row, mask);
                int[] lengths = packed.sequenceLengths(row);
                long[] conversations = packed.conversations(row);
                assertTrue(lengths.length == conversations.length || lengths.length == conversations.length + 1,
                        "a sequence per conversation and maybe the padding");
                assertEquals(pad, inputs[seq], "the sample's last value is padding");
                int at = 0;
                for (int i = 0; i < lengths.length; i++) {
                    int length = lengths[i];
                    assertEquals(0, length % multiple, "row " + row + " sequence " + i);
                    if (i < conversations.length) {
                        int c = (int) conversations[i];
                        seen[c]++;
                        SftTokenizer.Tokens t = sft.tokenize(SftExample.parse(lines.get(c)));
                        int n = Math.min(t.ids().length - 1, seq);
                        cut += t.ids().length - 1 > seq ? 1 : 0;
                        assertEquals(Math.min((n + multiple - 1) / multiple * multiple, seq), length, "conversation " + c);
                        for (int p = 0; p < length; p++) {
                            String where = "conversation " + c + " position " + p;
                            assertEquals(p < n ? t.ids()[p] : pad, inputs[at + p], where);
                            assertEquals(p < n ? t.ids()[p + 1] : pad, labels[at + p], where);
                            assertEquals(p < n ? t.lossMask()[p + 1] : 0, mask[at + p], where);
                        }
                        trained += n;
                    } else {
                        for (int p = at; p < seq; p++) {
                            assertEquals(pad, inputs[p]);
                            assertEquals(pad, labels[p]);
                            assertEquals(0, mask[p], "the row's tail is out of the loss");
                        }
                    }
                    at += length;
                }
                assertEquals(seq, at, "the lengths fill the row");
            }
            int[] once = new int[WORDS.length];
            java.util.Arrays.fill(once, 1);
            assertArrayEquals(once, seen, "every conversation in exactly one row");
            assertTrue(cut > 0, "some conversation is longer than a row");
            // 1346 positions of conversations (multiple 1): 6 rows at the least, which first-fit decreasing reaches
            assertEquals(6, packed.size(), "rows of " + WORDS.length + " conversations");
            String line = String.format(Locale.ROOT, "sft train: %d conversations in %d samples of %d positions, %.1f%% of"
                    + " them conversation tokens", WORDS.length, packed.size(), seq, 100.0 * trained / (packed.size() * seq));
            assertEquals(line, log.get(log.size() - 1));

            List<String> unpacked = new ArrayList<>();
            try (GptSplits one = build(data, seq, false, 1, unpacked)) {
                String expected = String.format(Locale.ROOT, "sft train: %d conversations in %d samples of %d positions,"
                        + " %.1f%% of them conversation tokens", WORDS.length, WORDS.length, seq, 100.0 * trained / (WORDS.length * seq));
                assertEquals(expected, unpacked.get(unpacked.size() - 1));
                assertTrue(trained / (double) packed.size() > trained / (double) WORDS.length);
            }
        }
    }

    @Test
    void aSequenceLengthThatIsNotAMultipleIsRefused() throws Exception {
        Path data = tmp.resolve("one.jsonl");
        Files.write(data, List.of(chat(0, 3)));
        assertEquals("sequence length 30 is not a multiple of the 4 positions each packed conversation is padded to",
                assertThrows(IllegalArgumentException.class, () -> build(data, 30, true, 4, new ArrayList<>())).getMessage());
    }
}
