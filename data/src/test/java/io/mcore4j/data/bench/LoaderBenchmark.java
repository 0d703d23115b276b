package io.mcore4j.data.bench;

import io.mcore4j.data.gpt.GptDatasetBuilder;
import io.mcore4j.data.gpt.GptSplits;
import io.mcore4j.data.gpt.MockGptDataset;
import io.mcore4j.data.gpt.SampleDataset;
import io.mcore4j.data.indexed.DType;
import io.mcore4j.data.indexed.IndexedDatasetWriter;
import io.mcore4j.data.sampler.PretrainingSampler;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Locale;
import java.util.Random;

/**
 * Loader throughput: writes a uint16 indexed dataset (50 M tokens by default), builds its GPT index (timed,
 * then loaded from the cache, timed), and reads samples of 2048 + 1 tokens in the order a data-parallel rank
 * would, printing samples/s and tokens/s; the mock dataset is measured the same way.
 *
 * <pre>
 * java -cp ... io.mcore4j.data.bench.LoaderBenchmark [millionTokens=50] [sequenceLength=2048] [directory]
 * </pre>
 */
public final class LoaderBenchmark {
    private LoaderBenchmark() {}

    /**
     * Runs the benchmark.
     *
     * @param args optional token count in millions, sequence length and working directory
     * @throws IOException if the files cannot be written
     */
    public static void main(String[] args) throws IOException {
        long tokens = (args.length > 0 ? Long.parseLong(args[0]) : 50) * 1_000_000L;
        int sequenceLength = args.length > 1 ? Integer.parseInt(args[1]) : 2048;
        Path dir = args.length > 2 ? Path.of(args[2]) : Files.createTempDirectory("mcore4j-loader-bench");
        Path prefix = dir.resolve("bench_text_document");
        Random random = new Random(1);
        long documents = 0;
        try (IndexedDatasetWriter w = IndexedDatasetWriter.create(prefix, DType.UINT16)) {
            for (long written = 0; written < tokens; documents++) {
                int[] doc = new int[50 + random.nextInt(3000)];
                for (int k = 0; k < doc.length; k++) {
                    doc[k] = random.nextInt(50_257);
                }
                w.addDocument(doc);
                written += doc.length;
            }
            w.finish();
        }
        long trainSamples = tokens / sequenceLength * 3; // three epochs
        System.out.printf(Locale.ROOT, "dataset: %,d tokens in %,d documents; %,d training samples of %d tokens%n",
                tokens, documents, trainSamples, sequenceLength);
        for (String pass : new String[] {"build", "cached"}) {
            long t0 = System.nanoTime();
            try (GptSplits splits = GptDatasetBuilder.create().dataPath(prefix.toString()).sequenceLength(sequenceLength)
                    .seed(1234).split("969,30,1").samples(trainSamples, 0, 0).build()) {
                double indexSeconds = (System.nanoTime() - t0) / 1e9;
                System.out.printf(Locale.ROOT, "index %s: %.2f s%n", pass, indexSeconds);
                measure("indexed (" + pass + ")", splits.train().orElseThrow(), sequenceLength);
            }
        }
        measure("mock", new MockGptDataset(trainSamples, sequenceLength, 50_257, 1), sequenceLength);
    }

    private static void measure(String name, SampleDataset dataset, int sequenceLength) {
        int microBatch = 4;
        int[] buffer = new int[sequenceLength + 1];
        long checksum = 0;
        long samples = 0;
        // warm up, then time rank 0 of 8 data-parallel ranks reading for about two seconds
        PretrainingSampler sampler = new PretrainingSampler(dataset.size(), 0, microBatch, 0, 8, true);
        long start = System.nanoTime();
        long deadline = start + 2_000_000_000L;
        for (long[] batch : sampler) {
            for (long i : batch) {
                dataset.sample(i, buffer);
                checksum += buffer[sequenceLength];
                samples++;
            }
            if (System.nanoTime() > deadline) {
                break;
            }
        }
        double seconds = (System.nanoTime() - start) / 1e9;
        System.out.printf(Locale.ROOT, "%-18s %,.0f samples/s, %,.1f M tokens/s (%,d samples, checksum %d)%n", name,
                samples / seconds, samples * (sequenceLength + 1.0) / seconds / 1e6, samples, checksum);
    }
}
