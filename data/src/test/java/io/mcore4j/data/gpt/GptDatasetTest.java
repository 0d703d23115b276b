package io.mcore4j.data.gpt;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class GptDatasetTest {
    @TempDir
    Path dir;

    private static int[][] documents(int count, int minLength, int maxLength, long seed) {
        java.util.Random random = new java.util.Random(seed);
        int[][] docs = new int[count][];
        int next = 0;
        for (int d = 0; d < count; d++) {
            docs[d] = new int[minLength + random.nextInt(maxLength - minLength + 1)];
            for (int k = 0; k < docs[d].length; k++) {
                docs[d][k] = next++; // every token unique, so a window tells where it came from
            }
        }
        return docs;
    }

    private static List<int[]> allSamples(SampleDataset ds) {
        List<int[]> out = new ArrayList<>();
        for (long i = 0; i < ds.size(); i++) {
            out.add(ds.sample(i));
        }
        return out;
    }

    /** The concatenation of the documents in the dataset's shuffled order. */
    private static int[] stream(GptDataset ds, int[][] docs) {
        int[] out = new int[0];
        for (long p = 0; p < ds.documentIndexLength(); p++) {
            int[] d = docs[(int) ds.documentAt(p)];
            int[] grown = Arrays.copyOf(out, out.length + d.length);
            System.arraycopy(d, 0, grown, out.length, d.length);
            out = grown;
        }
        return out;
    }

    @Test
    void oneDocumentGivesHandComputedWindows() {
        DocumentSource source = DocumentSource.of(new int[][] {{10, 11, 12, 13, 14, 15, 16}});
        // 3 samples of 4 tokens need 3*4+1 = 13 tokens: 2 epochs of 7, giving (14-1)/4 = 3 samples
        GptDataset ds = GptDataset.build(source, new GptDataset.Config(new DocumentRange(0, 1), 4, 3, 42));
        assertEquals(3, ds.size());
        assertEquals(2, ds.documentIndexLength());
        List<String> expected = new ArrayList<>(List.of(
                Arrays.toString(new int[] {10, 11, 12, 13, 14}),
                Arrays.toString(new int[] {14, 15, 16, 10, 11}),
                Arrays.toString(new int[] {11, 12, 13, 14, 15})));
        List<String> actual = new ArrayList<>();
        for (int[] s : allSamples(ds)) {
            actual.add(Arrays.toString(s));
        }
        expected.sort(null);
        actual.sort(null);
        assertEquals(expected, actual);
    }

    @Test
    void samplesAreConsecutiveWindowsOfTheShuffledDocumentsSharingOneToken() {
        int[][] docs = documents(40, 0, 30, 1);
        int sequenceLength = 16;
        GptDataset ds = GptDataset.build(DocumentSource.of(docs), new GptDataset.Config(new DocumentRange(5, 35), sequenceLength, 100, 7));
        long tokensPerEpoch = 0;
        for (int d = 5; d < 35; d++) {
            tokensPerEpoch += docs[d].length;
        }
        long epochs = (100L * sequenceLength + 1 + tokensPerEpoch - 1) / tokensPerEpoch;
        assertEquals(epochs * 30, ds.documentIndexLength());
        assertEquals((epochs * tokensPerEpoch - 1) / sequenceLength, ds.size());
        // each document of the range appears once per epoch, and no other
        Map<Long, Integer> seen = new HashMap<>();
        for (long p = 0; p < ds.documentIndexLength(); p++) {
            seen.merge(ds.documentAt(p), 1, Integer::sum);
        }
        assertEquals(30, seen.size());
        seen.forEach((doc, count) -> assertTrue(doc >= 5 && doc < 35 && count == epochs, doc + " x " + count));
        // the samples are exactly the windows [s*L, s*L+L] of the stream, in some order
        int[] stream = stream(ds, docs);
        List<String> windows = new ArrayList<>();
        for (int s = 0; s < ds.size(); s++) {
            windows.add(Arrays.toString(Arrays.copyOfRange(stream, s * sequenceLength, s * sequenceLength + sequenceLength + 1)));
        }
        List<String> samples = new ArrayList<>();
        for (int[] sample : allSamples(ds)) {
            assertEquals(sequenceLength + 1, sample.length);
            samples.add(Arrays.toString(sample));
        }
        assertNotEquals(windows, samples, "samples should be shuffled");
        windows.sort(null);
        samples.sort(null);
        assertEquals(windows, samples);
    }

    @Test
    void aShortFinalEpochIsShuffledOnItsOwn() {
        int[][] docs = new int[20][];
        for (int d = 0; d < 20; d++) {
            docs[d] = new int[5];
            Arrays.fill(docs[d], d);
        }
        // 100 tokens per epoch, 9 samples per epoch; 10 samples need 2 epochs and take only 1 from the second
        GptDataset ds = GptDataset.build(DocumentSource.of(docs), new GptDataset.Config(new DocumentRange(0, 20), 10, 10, 3));
        assertEquals(40, ds.documentIndexLength());
        boolean[] inFinal = new boolean[20];
        for (long p = 20; p < 40; p++) {
            inFinal[(int) ds.documentAt(p)] = true;
        }
        for (int d = 0; d < 20; d++) {
            assertTrue(inFinal[d], "document " + d + " missing from the separately shuffled final epoch");
        }
        // the samples are shuffled within the first 9 (before the final epoch) and within the rest
        assertEquals(19, ds.size());
        int[] stream = stream(ds, docs);
        List<String> firstWindows = new ArrayList<>();
        List<String> firstSamples = new ArrayList<>();
        for (int i = 0; i < 9; i++) {
            firstWindows.add(Arrays.toString(Arrays.copyOfRange(stream, 10 * i, 10 * i + 11)));
            firstSamples.add(Arrays.toString(ds.sample(i)));
        }
        firstWindows.sort(null);
        firstSamples.sort(null);
        assertEquals(firstWindows, firstSamples);
    }

    @Test
    void sameSeedSameSamplesOtherSeedOtherOrder() {
        int[][] docs = documents(50, 1, 40, 2);
        GptDataset.Config config = new GptDataset.Config(new DocumentRange(0, 50), 32, 60, 1234);
        List<int[]> a = allSamples(GptDataset.build(DocumentSource.of(docs), config));
        List<int[]> b = allSamples(GptDataset.build(DocumentSource.of(docs), config));
        List<int[]> c = allSamples(GptDataset.build(DocumentSource.of(docs), new GptDataset.Config(new DocumentRange(0, 50), 32, 60, 1235)));
        assertEquals(a.size(), b.size());
        for (int i = 0; i < a.size(); i++) {
            assertArrayEquals(a.get(i), b.get(i), "sample " + i);
        }
        int differing = 0;
        for (int i = 0; i < a.size(); i++) {
            differing += Arrays.equals(a.get(i), c.get(i)) ? 0 : 1;
        }
        assertTrue(differing > a.size() / 2, differing + " of " + a.size() + " samples differ between seeds");
    }

    @Test
    void indicesAreCachedAtomicallyAndReusedAfterARestart() throws IOException {
        int[][] docs = documents(30, 1, 20, 4);
        DocumentSource source = DocumentSource.of(docs);
        GptDataset.Config config = new GptDataset.Config(new DocumentRange(0, 30), 8, 50, 9);
        GptDataset built = GptDataset.buildCached(source, config, dir, "corpus_text_document");
        assertFalse(built.loadedFromCache());
        String hash = IndexCache.hash(GptDataset.describe(source, config));
        for (String name : List.of("doc_idx.bin", "sample_idx.bin", "shuffle_idx.bin", "description.txt")) {
            assertTrue(Files.isRegularFile(dir.resolve("corpus_text_document." + hash + "." + name)), name);
        }
        try (var files = Files.list(dir)) {
            assertEquals(4, files.count(), "no temporary files are left");
        }
        GptDataset loaded = GptDataset.buildCached(source, config, dir, "corpus_text_document");
        assertTrue(loaded.loadedFromCache());
        assertEquals(built.size(), loaded.size());
        for (long i = 0; i < built.size(); i++) {
            assertArrayEquals(built.sample(i), loaded.sample(i));
        }
        // a damaged entry is rebuilt, with the same result
        Path shuffle = dir.resolve("corpus_text_document." + hash + ".shuffle_idx.bin");
        Files.write(shuffle, Arrays.copyOf(Files.readAllBytes(shuffle), 20));
        GptDataset rebuilt = GptDataset.buildCached(source, config, dir, "corpus_text_document");
        assertFalse(rebuilt.loadedFromCache());
        assertArrayEquals(built.sample(3), rebuilt.sample(3));
        // another configuration gets another entry
        GptDataset other = GptDataset.buildCached(source, new GptDataset.Config(new DocumentRange(0, 30), 8, 50, 10), dir, "corpus_text_document");
        assertFalse(other.loadedFromCache());
    }

    @Test
    void emptyDocumentsAreSkippedAndEmptyRangesRejected() {
        int[][] docs = {{}, {1, 2, 3}, {}, {}, {4, 5}, {}};
        GptDataset ds = GptDataset.build(DocumentSource.of(docs), new GptDataset.Config(new DocumentRange(0, 6), 2, 4, 0));
        for (long i = 0; i < ds.size(); i++) {
            int[] s = ds.sample(i);
            assertTrue(Arrays.stream(s).allMatch(t -> t >= 1 && t <= 5), Arrays.toString(s));
        }
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> GptDataset.build(DocumentSource.of(docs), new GptDataset.Config(new DocumentRange(2, 4), 2, 4, 0)));
        assertTrue(e.getMessage().contains("hold 0 tokens"), e.getMessage());
        assertThrows(IllegalArgumentException.class, () -> new GptDataset.Config(new DocumentRange(0, 1), 0, 1, 0));
        assertThrows(IndexOutOfBoundsException.class, () -> ds.sample(ds.size()));
    }
}
