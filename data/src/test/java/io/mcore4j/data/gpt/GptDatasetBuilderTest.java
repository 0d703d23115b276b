package io.mcore4j.data.gpt;

import io.mcore4j.data.indexed.DType;
import io.mcore4j.data.indexed.IndexedDatasetWriter;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class GptDatasetBuilderTest {
    @TempDir
    Path dir;

    /** Writes {@code documents} documents whose tokens all lie in {@code [base, base + 100)}. */
    private Path dataset(String name, int documents, int base) throws IOException {
        Path prefix = dir.resolve(name);
        java.util.Random random = new java.util.Random(name.hashCode());
        try (IndexedDatasetWriter w = IndexedDatasetWriter.create(prefix, DType.UINT16)) {
            for (int d = 0; d < documents; d++) {
                w.addDocument(random.ints(5 + random.nextInt(30), base, base + 100).toArray());
            }
            w.finish();
        }
        return prefix;
    }

    @Test
    void blendedSplitsHaveExactProportionsAndDisjointDocuments() throws IOException {
        Path a = dataset("a_text_document", 200, 0);
        Path b = dataset("b_text_document", 100, 100);
        try (GptSplits splits = GptDatasetBuilder.create()
                .dataPath("0.7 " + a + " 0.3 " + b)
                .sequenceLength(16).seed(1234).split("90,10,0")
                .samples(1000, 50, 0)
                .build()) {
            SampleDataset train = splits.train().orElseThrow();
            assertEquals(1000, train.size());
            assertEquals(17, train.sample(0).length);
            int fromA = 0;
            for (long i = 0; i < train.size(); i++) {
                int[] s = train.sample(i);
                boolean allA = Arrays.stream(s).allMatch(t -> t < 100);
                boolean allB = Arrays.stream(s).allMatch(t -> t >= 100 && t < 200);
                assertTrue(allA || allB, "sample " + i + " mixes datasets");
                fromA += allA ? 1 : 0;
            }
            assertEquals(700, fromA);
            assertEquals(50, splits.valid().orElseThrow().size());
            assertTrue(splits.test().isEmpty());
        }
        // the index caches sit next to the data
        try (var files = Files.list(dir)) {
            List<String> names = files.map(p -> p.getFileName().toString()).toList();
            assertTrue(names.stream().anyMatch(n -> n.matches("a_text_document\\.[0-9a-f]{32}\\.shuffle_idx\\.bin")), names.toString());
            assertTrue(names.stream().anyMatch(n -> n.matches("blend\\.[0-9a-f]{32}\\.dataset_index\\.bin")), names.toString());
        }
    }

    @Test
    void rebuildingLoadsTheCacheAndGivesTheSameSamples() throws IOException {
        Path a = dataset("c_text_document", 120, 0);
        int[][] first = new int[40][];
        try (GptSplits splits = GptDatasetBuilder.create().dataPath(a.toString()).sequenceLength(8).seed(5).samples(40, 0, 0).build()) {
            GptDataset train = (GptDataset) splits.train().orElseThrow();
            assertFalse(train.loadedFromCache());
            for (int i = 0; i < 40; i++) {
                first[i] = train.sample(i);
            }
        }
        try (GptSplits splits = GptDatasetBuilder.create().dataPath(a.toString()).sequenceLength(8).seed(5).samples(40, 0, 0).build()) {
            GptDataset train = (GptDataset) splits.train().orElseThrow();
            assertTrue(train.loadedFromCache());
            for (int i = 0; i < 40; i++) {
                assertArrayEquals(first[i], train.sample(i));
            }
        }
        Path elsewhere = dir.resolve("cache");
        try (GptSplits splits = GptDatasetBuilder.create().dataPath(a.toString()).sequenceLength(8).seed(5).samples(40, 0, 0)
                .cacheDirectory(elsewhere).build()) {
            assertArrayEquals(first[7], splits.train().orElseThrow().sample(7));
        }
        try (var files = Files.list(elsewhere)) {
            assertEquals(4, files.count());
        }
    }

    @Test
    void trainAndValidUseDifferentDocuments() throws IOException {
        Path prefix = dir.resolve("ordered");
        try (IndexedDatasetWriter w = IndexedDatasetWriter.create(prefix, DType.UINT16)) {
            for (int d = 0; d < 100; d++) {
                int[] tokens = new int[10];
                Arrays.fill(tokens, d);
                w.addDocument(tokens);
            }
            w.finish();
        }
        try (GptSplits splits = GptDatasetBuilder.create().dataPath(prefix.toString()).sequenceLength(10).split("80,20,0")
                .samples(100, 100, 0).cache(false).build()) {
            SampleDataset train = splits.train().orElseThrow();
            SampleDataset valid = splits.valid().orElseThrow();
            for (long i = 0; i < 100; i++) {
                assertTrue(Arrays.stream(train.sample(i)).allMatch(t -> t < 80));
                assertTrue(Arrays.stream(valid.sample(i)).allMatch(t -> t >= 80));
            }
        }
    }

    @Test
    void mockSplitsNeedNoFiles() throws IOException {
        try (GptSplits splits = GptDatasetBuilder.create().mock(50_257).sequenceLength(32).samples(10, 2, 1).build()) {
            assertEquals(10, splits.train().orElseThrow().size());
            assertEquals(1, splits.test().orElseThrow().size());
            assertFalse(Arrays.equals(splits.train().orElseThrow().sample(0), splits.valid().orElseThrow().sample(0)));
        }
    }

    @Test
    void misconfigurationsAreNamed() throws IOException {
        assertThrows(IllegalStateException.class, () -> GptDatasetBuilder.create().mock(10).build());
        assertThrows(IllegalStateException.class, () -> GptDatasetBuilder.create().sequenceLength(4).build());
        Path a = dataset("few", 3, 0);
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> GptDatasetBuilder.create()
                .dataPath(a.toString()).sequenceLength(4).split("969,30,1").samples(10, 10, 0).build());
        assertTrue(e.getMessage().contains("split valid") && e.getMessage().contains("no sequences"), e.getMessage());
    }
}
