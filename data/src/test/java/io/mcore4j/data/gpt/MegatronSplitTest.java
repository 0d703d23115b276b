package io.mcore4j.data.gpt;

import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import io.mcore4j.data.indexed.DType;
import io.mcore4j.data.indexed.IndexedDatasetWriter;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.nio.file.Path;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** {@code --split} ranges against Megatron-LM's own dataset builder (splits.json). */
class MegatronSplitTest {
    @TempDir
    Path dir;

    @Test
    void rangesMatchMegatronOverAGridOfSequenceCountsAndSplits() {
        int cases = 0;
        for (JsonElement e : MegatronFixtures.load("splits.json").getAsJsonArray("cases")) {
            JsonObject c = e.getAsJsonObject();
            long n = c.get("sequences").getAsLong();
            SplitWeights weights = SplitWeights.parse(c.get("split").getAsString());
            for (DatasetSplit split : DatasetSplit.values()) {
                JsonElement expected = c.getAsJsonArray("ranges").get(split.ordinal());
                String where = n + " sequences, split " + c.get("split").getAsString() + ", " + split;
                if (expected.isJsonNull()) {
                    assertFalse(weights.includes(split), where + " is absent in Megatron");
                    continue;
                }
                assertTrue(weights.includes(split), where);
                DocumentRange range = weights.range(split, n);
                if (expected.isJsonPrimitive()) {
                    assertTrue(range.isEmpty(), where + " is empty in Megatron, got " + range);
                } else {
                    int[] bounds = MegatronFixtures.ints(expected);
                    assertEquals(new DocumentRange(bounds[0], bounds[1]), range, where);
                }
            }
            cases++;
        }
        assertEquals(16 * 13, cases);
    }

    @Test
    void theIssuesThreeExamples() throws IOException {
        SplitWeights standard = SplitWeights.parse("969,30,1");
        assertEquals(new DocumentRange(0, 47), standard.range(DatasetSplit.TRAIN, 49));
        assertEquals(new DocumentRange(47, 49), standard.range(DatasetSplit.VALID, 49));

        // 25 documents with 98,2,0: a one-document valid split, and no test split at all
        Path small = write("small", 25, 0);
        try (GptSplits splits = GptDatasetBuilder.create().dataPath(small.toString()).sequenceLength(4).seed(1)
                .split("98,2,0").samples(10, 3, 5).cache(false).build()) {
            assertEquals(new DocumentRange(24, 25), ((GptDataset) splits.valid().orElseThrow()).config().range());
            assertFalse(splits.test().isPresent());
        }

        // 100 documents, the last 10 without sequences: Megatron splits the 90 sequences
        Path tail = write("tail", 90, 10);
        try (GptSplits splits = GptDatasetBuilder.create().dataPath(tail.toString()).sequenceLength(4).seed(1)
                .split("90,10,0").samples(10, 3, 0).cache(false).build()) {
            assertEquals(new DocumentRange(0, 81), assertInstanceOf(GptDataset.class, splits.train().orElseThrow()).config().range());
            GptDataset valid = assertInstanceOf(GptDataset.class, splits.valid().orElseThrow());
            assertEquals(new DocumentRange(81, 90), valid.config().range());
            assertTrue(valid.size() >= 3);
        }
    }

    /** {@code sequences} one-sequence documents of 5 tokens each, then {@code empty} documents without sequences. */
    private Path write(String name, int sequences, int empty) throws IOException {
        Path prefix = dir.resolve(name);
        try (IndexedDatasetWriter writer = IndexedDatasetWriter.create(prefix, DType.UINT16)) {
            for (int d = 0; d < sequences; d++) {
                writer.addSequence(new int[] {d, d + 1, d + 2, d + 3, d + 4});
                writer.endDocument();
            }
            for (int d = 0; d < empty; d++) {
                writer.endDocument();
            }
            writer.finish();
        }
        return prefix;
    }
}
