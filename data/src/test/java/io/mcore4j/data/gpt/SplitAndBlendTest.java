package io.mcore4j.data.gpt;

import org.junit.jupiter.api.Test;

import java.nio.file.Path;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class SplitAndBlendTest {
    @Test
    void splitsCutDocumentsLikeMegatron() {
        SplitWeights split = SplitWeights.parse("969,30,1");
        assertEquals(new DocumentRange(0, 969), split.range(DatasetSplit.TRAIN, 1000));
        assertEquals(new DocumentRange(969, 999), split.range(DatasetSplit.VALID, 1000));
        assertEquals(new DocumentRange(999, 1000), split.range(DatasetSplit.TEST, 1000));
        // 98,2 over 10 documents: round(9.8) = 10, so valid [10, 10) is empty and test (weight 0) absent
        SplitWeights two = SplitWeights.parse("98,2");
        assertEquals(new DocumentRange(0, 10), two.range(DatasetSplit.TRAIN, 10));
        assertTrue(two.range(DatasetSplit.VALID, 10).isEmpty());
        assertTrue(two.range(DatasetSplit.TEST, 10).isEmpty());
        // thirds of 10: Megatron rounds the cumulative bounds 3.33 and 6.67, so the middle split gets 4
        SplitWeights thirds = SplitWeights.parse("1, 1, 1");
        assertEquals(new DocumentRange(0, 3), thirds.range(DatasetSplit.TRAIN, 10));
        assertEquals(new DocumentRange(3, 7), thirds.range(DatasetSplit.VALID, 10));
        assertEquals(new DocumentRange(7, 10), thirds.range(DatasetSplit.TEST, 10));
        assertEquals(new DocumentRange(0, 1), SplitWeights.parse("1").range(DatasetSplit.TRAIN, 1));
    }

    @Test
    void badSplitsAreRejected() {
        assertThrows(IllegalArgumentException.class, () -> SplitWeights.parse("1,2,3,4"));
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> SplitWeights.parse("90,x"));
        assertTrue(e.getMessage().contains("\"x\""), e.getMessage());
        assertThrows(IllegalArgumentException.class, () -> SplitWeights.parse("0,0,0"));
        assertThrows(IllegalArgumentException.class, () -> SplitWeights.parse("-1,2"));
    }

    @Test
    void dataPathsParseAsMegatronWritesThem() {
        DataBlend weighted = DataBlend.parse("0.7 data/a_text_document 0.3 data/b_text_document");
        assertEquals(List.of(Path.of("data/a_text_document"), Path.of("data/b_text_document")), weighted.prefixes());
        assertArrayEquals(new double[] {0.7, 0.3}, weighted.normalizedWeights(), 1e-12);
        DataBlend unweighted = DataBlend.parse(List.of("a", "b", "c"));
        assertArrayEquals(new double[] {1 / 3.0, 1 / 3.0, 1 / 3.0}, unweighted.normalizedWeights(), 1e-12);
        assertEquals(List.of(Path.of("only")), DataBlend.parse("only").prefixes());
        assertArrayEquals(new double[] {0.25, 0.75}, DataBlend.parse("1 a 3 b").normalizedWeights(), 1e-12);
        IllegalArgumentException odd = assertThrows(IllegalArgumentException.class, () -> DataBlend.parse("0.7 a 0.3"));
        assertTrue(odd.getMessage().contains("pairs"), odd.getMessage());
        IllegalArgumentException swapped = assertThrows(IllegalArgumentException.class, () -> DataBlend.parse("a 0.7 b 0.3"));
        assertTrue(swapped.getMessage().contains("\"a\" should be a weight"), swapped.getMessage());
        IllegalArgumentException negative = assertThrows(IllegalArgumentException.class, () -> DataBlend.parse("-1 a 2 b"));
        assertTrue(negative.getMessage().contains("weight -1.0 of dataset a"), negative.getMessage());
    }

    @Test
    void blendingFollowsTheLargestDeficitByHand() {
        BlendingIndex index = BlendingIndex.build(new double[] {2, 1, 1}, 8);
        int[] datasets = new int[8];
        long[] samples = new long[8];
        for (int i = 0; i < 8; i++) {
            datasets[i] = index.datasetIndex(i);
            samples[i] = index.datasetSampleIndex(i);
        }
        assertArrayEquals(new int[] {0, 1, 2, 0, 0, 1, 2, 0}, datasets);
        assertArrayEquals(new long[] {0, 0, 0, 1, 2, 1, 1, 3}, samples);
        assertArrayEquals(new long[] {4, 2, 2}, index.counts());
    }

    @Test
    void blendingProportionsAreExactAtEveryPrefix() {
        double[] weights = {0.7, 0.2, 0.1};
        int n = 10_000;
        BlendingIndex index = BlendingIndex.build(weights, n);
        long[] counts = new long[3];
        for (int i = 0; i < n; i++) {
            int d = index.datasetIndex(i);
            assertEquals(counts[d], index.datasetSampleIndex(i), "samples of a dataset are taken in order");
            counts[d]++;
            for (int k = 0; k < 3; k++) {
                double error = counts[k] - weights[k] * (i + 1);
                assertTrue(Math.abs(error) < 1.0 + 1e-9, "dataset " + k + " after " + (i + 1) + " samples: " + counts[k]);
            }
        }
        assertArrayEquals(new long[] {7000, 2000, 1000}, counts);
        assertArrayEquals(counts, index.counts());
        assertArrayEquals(new long[] {700, 300}, BlendingIndex.build(new double[] {0.7, 0.3}, 1000).counts());
    }

    @Test
    void aCachedBlendingIndexEqualsAComputedOne(@org.junit.jupiter.api.io.TempDir Path dir) {
        BlendingIndex computed = BlendingIndex.build(new double[] {3, 1}, 500);
        BlendingIndex stored = BlendingIndex.buildCached(new double[] {0.75, 0.25}, 500, dir);
        BlendingIndex loaded = BlendingIndex.buildCached(new double[] {3, 1}, 500, dir);
        assertArrayEquals(computed.counts(), loaded.counts());
        assertArrayEquals(new long[] {375, 125}, loaded.counts());
        for (long i = 0; i < 500; i++) {
            assertEquals(computed.datasetIndex(i), stored.datasetIndex(i));
            assertEquals(computed.datasetIndex(i), loaded.datasetIndex(i));
            assertEquals(computed.datasetSampleIndex(i), loaded.datasetSampleIndex(i));
        }
    }

    @Test
    void blendedDatasetReadsItsComponents() {
        MockGptDataset a = new MockGptDataset(10, 4, 100, 1);
        MockGptDataset b = new MockGptDataset(10, 4, 100, 2);
        BlendingIndex index = BlendingIndex.build(new double[] {0.5, 0.5}, 6);
        BlendedDataset blend = new BlendedDataset(List.of(a, b), index);
        assertEquals(6, blend.size());
        assertArrayEquals(a.sample(0), blend.sample(0));
        assertArrayEquals(b.sample(0), blend.sample(1));
        assertArrayEquals(a.sample(1), blend.sample(2));
        assertThrows(IllegalArgumentException.class, () -> new BlendedDataset(List.of(a, new MockGptDataset(10, 8, 100, 2)), index));
        assertThrows(IllegalArgumentException.class, () -> new BlendedDataset(List.of(a, new MockGptDataset(2, 4, 100, 2)), index));
    }

    @Test
    void mockDataIsDeterministicInRangeAndOfAnySize() {
        MockGptDataset mock = new MockGptDataset(1L << 40, 128, 1000, 5);
        assertEquals(1L << 40, mock.size());
        int[] s = mock.sample((1L << 40) - 1);
        assertEquals(129, s.length);
        assertTrue(java.util.Arrays.stream(s).allMatch(t -> t >= 0 && t < 1000));
        assertArrayEquals(s, new MockGptDataset(1L << 40, 128, 1000, 5).sample((1L << 40) - 1));
        assertTrue(!java.util.Arrays.equals(mock.sample(0), mock.sample(1)));
        assertTrue(!java.util.Arrays.equals(mock.sample(0), new MockGptDataset(10, 128, 1000, 6).sample(0)));
        // roughly uniform: every id of a small vocabulary shows up
        MockGptDataset small = new MockGptDataset(100, 128, 16, 5);
        boolean[] seen = new boolean[16];
        for (int i = 0; i < 100; i++) {
            for (int t : small.sample(i)) {
                seen[t] = true;
            }
        }
        for (boolean b : seen) {
            assertTrue(b);
        }
    }
}
