package io.mcore4j.data.gpt;

import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import io.mcore4j.data.indexed.DType;
import io.mcore4j.data.indexed.IndexedDatasetWriter;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * GPT sample order against Megatron-LM's own {@code BlendedMegatronDatasetBuilder}/{@code GPTDataset}
 * (gpt_indices.json): the same corpus, rebuilt here with mcore4j's writer, must give the same document,
 * sample and shuffle indices, the same blending index and the same first 200 samples of every split.
 */
class MegatronGptOrderTest {
    @TempDir
    static Path dir;

    private static JsonObject fixture;

    @BeforeAll
    static void writeCorpora() throws IOException {
        fixture = MegatronFixtures.load("gpt_indices.json");
        for (var corpus : fixture.getAsJsonObject("corpora").entrySet()) {
            JsonObject c = corpus.getValue().getAsJsonObject();
            int salt = c.get("salt").getAsInt();
            int[] lengths = MegatronFixtures.ints(c.get("lengths"));
            try (IndexedDatasetWriter writer = IndexedDatasetWriter.create(dir.resolve("corpus_" + corpus.getKey()), DType.INT32)) {
                for (int s = 0; s < lengths.length; s++) {
                    int[] tokens = new int[lengths[s]];
                    for (int i = 0; i < tokens.length; i++) {
                        tokens[i] = token(s, i, salt);
                    }
                    writer.addSequence(tokens);
                    writer.endDocument();
                }
                writer.finish();
            }
        }
    }

    /** The generator's token function. */
    private static int token(int sequence, int position, int salt) {
        return (int) ((salt * 1_000_003L + sequence * 1009L + position) % 2_000_000_000L);
    }

    @Test
    void twoSeedsAndABlendGiveMegatronsSamplesAndIndices() throws IOException {
        int cases = 0;
        for (JsonElement e : fixture.getAsJsonArray("cases")) {
            checkCase(e.getAsJsonObject());
            cases++;
        }
        assertEquals(3, cases);
    }

    private void checkCase(JsonObject c) throws IOException {
        String name = c.get("name").getAsString();
        JsonObject blend = c.getAsJsonObject("blend");
        StringBuilder dataPath = new StringBuilder();
        JsonArray corpora = blend.getAsJsonArray("corpora");
        for (int k = 0; k < corpora.size(); k++) {
            if (!blend.get("weights").isJsonNull()) {
                dataPath.append(blend.getAsJsonArray("weights").get(k).getAsDouble()).append(' ');
            }
            dataPath.append(dir.resolve("corpus_" + corpora.get(k).getAsString())).append(' ');
        }
        long[] sizes = MegatronFixtures.longs(c.get("sizes"));
        try (GptSplits splits = GptDatasetBuilder.create().dataPath(dataPath.toString().trim())
                .sequenceLength(c.get("sequence_length").getAsInt()).seed(c.get("seed").getAsLong())
                .split(c.get("split").getAsString()).samples(sizes[0], sizes[1], sizes[2]).cache(false).build()) {
            for (JsonElement se : c.getAsJsonArray("splits")) {
                JsonObject expected = se.getAsJsonObject();
                DatasetSplit split = DatasetSplit.values()[expected.get("split").getAsInt()];
                String where = name + " " + split;
                if (!expected.get("present").getAsBoolean()) {
                    assertFalse(splits.get(split).isPresent(), where);
                    continue;
                }
                SampleDataset dataset = splits.get(split).orElseThrow();
                assertEquals(expected.get("length").getAsLong(), dataset.size(), where + " length");
                List<GptDataset> components = new ArrayList<>();
                if (dataset instanceof BlendedDataset blended) {
                    BlendingIndex index = blended.index();
                    int[] datasetIndex = MegatronFixtures.ints(expected.get("dataset_index"));
                    long[] datasetSampleIndex = MegatronFixtures.longs(expected.get("dataset_sample_index"));
                    assertEquals(datasetIndex.length, index.size(), where);
                    for (int i = 0; i < datasetIndex.length; i++) {
                        assertEquals(datasetIndex[i], index.datasetIndex(i), where + " dataset index " + i);
                        assertEquals(datasetSampleIndex[i], index.datasetSampleIndex(i), where + " dataset sample index " + i);
                    }
                    blended.components().forEach(d -> components.add(assertInstanceOf(GptDataset.class, d)));
                } else {
                    components.add(assertInstanceOf(GptDataset.class, dataset));
                }
                JsonArray expectedComponents = expected.getAsJsonArray("components");
                assertEquals(expectedComponents.size(), components.size(), where);
                for (int k = 0; k < components.size(); k++) {
                    checkIndices(where + " component " + k, expectedComponents.get(k).getAsJsonObject(),
                            components.get(k), dir.resolve("corpus_" + corpora.get(k).getAsString()));
                }
                JsonArray samples = expected.getAsJsonArray("samples");
                assertTrue(samples.size() == Math.min(200, dataset.size()), where);
                for (int i = 0; i < samples.size(); i++) {
                    assertArrayEquals(MegatronFixtures.ints(samples.get(i)), dataset.sample(i), where + " sample " + i);
                }
            }
        }
    }

    private static void checkIndices(String where, JsonObject expected, GptDataset dataset, Path prefix) throws IOException {
        int[] range = MegatronFixtures.ints(expected.get("indices"));
        GptDataset.Config config = dataset.config();
        assertEquals(new DocumentRange(range[0], range[1]), config.range(), where + " sequence range");
        assertEquals(expected.get("num_samples").getAsLong(), config.requestedSamples(), where + " samples requested");
        try (var reader = io.mcore4j.data.indexed.IndexedDatasetReader.open(prefix)) {
            GptIndices indices = GptIndices.build(DocumentSource.of(reader), config.range(), config.sequenceLength(),
                    config.requestedSamples(), config.seed());
            assertArrayEquals(MegatronFixtures.ints(expected.get("document_index")), indices.documentIndex, where + " document index");
            JsonArray rows = expected.getAsJsonArray("sample_index");
            int[] flat = new int[2 * rows.size()];
            for (int r = 0; r < rows.size(); r++) {
                int[] row = MegatronFixtures.ints(rows.get(r));
                flat[2 * r] = row[0];
                flat[2 * r + 1] = row[1];
            }
            assertArrayEquals(flat, indices.sampleIndex, where + " sample index");
            assertArrayEquals(MegatronFixtures.ints(expected.get("shuffle_index")), indices.shuffleIndex, where + " shuffle index");
        }
    }
}
