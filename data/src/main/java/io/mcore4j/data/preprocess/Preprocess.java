package io.mcore4j.data.preprocess;

import io.mcore4j.data.indexed.DType;
import io.mcore4j.data.indexed.IndexedDatasetWriter;
import io.mcore4j.data.progress.ProgressBar;
import io.mcore4j.data.tokenizer.Tokenizer;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.BufferedInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.InterruptedIOException;
import java.io.PrintStream;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CharsetDecoder;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Queue;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * Tokenizes the string fields of a JSON Lines file into Megatron indexed datasets, one per key, named
 * {@code <prefix>_<key>_document.bin/.idx} as Megatron names them: the library behind the {@code preprocess}
 * command (its command line is {@code io.mcore4j.samples.preprocess.PreprocessData} in {@code mcore4j-samples}).
 *
 * <p>The main thread reads the input in batches of lines; {@code --workers} threads decode, parse and
 * tokenize batches; the main thread writes the results strictly in input order, so any worker count gives
 * byte-identical files. Each line becomes one document per key: the text's tokens as one sequence, plus the
 * end-of-document id with {@code --append-eod}; an empty text becomes an empty document (no sequence), as in
 * Megatron. The token type is the smallest that fits the vocabulary. Blank lines are ignored; a line that is
 * not valid UTF-8 or not a JSON object with every key as a string is reported with its line number, then
 * skipped or fatal according to {@code --on-bad-line}. A failed run leaves no output files.
 */
public final class Preprocess {
    private static final Logger LOG = LoggerFactory.getLogger(Preprocess.class);

    private Preprocess() {}

    /**
     * Tokenizes the input and writes the datasets.
     *
     * @param options what to do
     * @param console where the progress bar and bad-line reports go, or null for none (reports then go to the
     *     log)
     * @return counts and output prefixes
     * @throws BadInputLineException for a bad line under {@code --on-bad-line fail}
     * @throws IOException if the input cannot be read or an output cannot be written
     */
    public static PreprocessResult run(PreprocessOptions options, PrintStream console) throws IOException {
        long start = System.nanoTime();
        Queue<Tokenizer> created = new ConcurrentLinkedQueue<>();
        TokenizerSpec spec = options.tokenizer();
        Tokenizer probe = spec.open();
        created.add(probe);
        ThreadLocal<Tokenizer> perThread = ThreadLocal.withInitial(() -> {
            if (spec.threadSafe()) {
                return probe;
            }
            try {
                Tokenizer t = spec.open();
                created.add(t);
                return t;
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        });
        int eod = -1;
        if (options.appendEod()) {
            eod = probe.endOfDocument().orElseThrow(() -> new IllegalArgumentException(
                    "--append-eod needs an end-of-document token; name one with --eod-token"));
        }
        DType dtype = DType.smallestFor(probe.vocabularySize());
        List<IndexedDatasetWriter> writers = new ArrayList<>();
        AtomicInteger threadNumber = new AtomicInteger();
        ExecutorService pool = Executors.newFixedThreadPool(options.workers(), r -> {
            Thread t = new Thread(r, "preprocess-worker-" + threadNumber.incrementAndGet());
            t.setDaemon(true);
            return t;
        });
        try {
            for (String key : options.jsonKeys()) {
                writers.add(IndexedDatasetWriter.create(options.outputPrefix(key), dtype));
            }
            // the bar only on an interactive terminal; elsewhere the result line is the record
            ProgressBar bar = options.progress() && console != null && System.console() != null
                    ? new ProgressBar(console, "MB", 500_000_000L) : null;
            long totalMegabytes = Math.max(1, Files.size(options.input()) / 1_000_000);
            Counts counts = new Counts();
            int finalEod = eod;
            try (InputStream in = new BufferedInputStream(Files.newInputStream(options.input()), 1 << 20)) {
                LineBatcher batcher = new LineBatcher(in, options.batchLines());
                ArrayDeque<Future<BatchResult>> inFlight = new ArrayDeque<>();
                int maxInFlight = 2 * options.workers() + 1;
                for (LineBatcher.Batch batch = batcher.next(); batch != null; batch = batcher.next()) {
                    LineBatcher.Batch b = batch;
                    inFlight.add(pool.submit(() -> tokenize(b, options.jsonKeys(), perThread.get(), finalEod)));
                    while (inFlight.size() >= maxInFlight) {
                        write(await(inFlight.poll()), writers, options, console, counts, bar);
                        progress(bar, counts, totalMegabytes);
                    }
                }
                while (!inFlight.isEmpty()) {
                    write(await(inFlight.poll()), writers, options, console, counts, bar);
                    progress(bar, counts, totalMegabytes);
                }
            }
            List<Path> outputs = new ArrayList<>();
            for (int k = 0; k < writers.size(); k++) {
                writers.get(k).finish();
                outputs.add(options.outputPrefix(options.jsonKeys().get(k)));
            }
            if (bar != null) {
                bar.finish();
            }
            return new PreprocessResult(counts.documents, counts.skipped, counts.blank, counts.tokens, counts.bytes,
                    (System.nanoTime() - start) / 1e9, dtype, outputs);
        } finally {
            pool.shutdownNow();
            for (IndexedDatasetWriter w : writers) {
                w.close();
            }
            for (Tokenizer t : created) {
                t.close();
            }
        }
    }

    private static BatchResult await(Future<BatchResult> future) throws IOException {
        try {
            return future.get();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new InterruptedIOException("interrupted while tokenizing");
        } catch (ExecutionException e) {
            Throwable cause = e.getCause();
            if (cause instanceof UncheckedIOException u) {
                throw u.getCause();
            }
            if (cause instanceof RuntimeException r) {
                throw r;
            }
            if (cause instanceof Error err) {
                throw err;
            }
            throw new IOException(cause);
        }
    }

    /** Per line: one token array per key, or a problem; {@code null} tokens and problem mean a blank line. */
    private record BatchResult(long firstLine, long bytes, int[][][] tokens, String[] problems) {}

    private static BatchResult tokenize(LineBatcher.Batch batch, List<String> keys, Tokenizer tokenizer, int eod) {
        CharsetDecoder decoder = StandardCharsets.UTF_8.newDecoder()
                .onMalformedInput(CodingErrorAction.REPORT).onUnmappableCharacter(CodingErrorAction.REPORT);
        int n = batch.lines().size();
        int[][][] tokens = new int[n][][];
        String[] problems = new String[n];
        for (int i = 0; i < n; i++) {
            byte[] bytes = batch.lines().get(i);
            String line;
            try {
                line = decoder.decode(ByteBuffer.wrap(bytes)).toString();
            } catch (CharacterCodingException e) {
                problems[i] = "not valid UTF-8 (" + e.getMessage() + ")";
                continue;
            }
            if (line.isBlank()) {
                continue;
            }
            String[] texts;
            try {
                texts = StrictJson.stringFields(line, keys);
            } catch (JsonSyntaxException e) {
                problems[i] = e.getMessage();
                continue;
            }
            tokens[i] = new int[keys.size()][];
            for (int k = 0; k < texts.length; k++) {
                int[] ids;
                try {
                    ids = tokenizer.encode(texts[k]);
                } catch (IllegalArgumentException e) {
                    // a text the tokenizer cannot read (a NullTokenizer text that is not ids) is a bad line
                    problems[i] = "field \"" + keys.get(k) + "\": " + e.getMessage();
                    tokens[i] = null;
                    break;
                }
                if (eod >= 0 && ids.length > 0) {
                    ids = Arrays.copyOf(ids, ids.length + 1);
                    ids[ids.length - 1] = eod;
                }
                tokens[i][k] = ids;
            }
        }
        return new BatchResult(batch.firstLine(), batch.bytes(), tokens, problems);
    }

    private static final class Counts {
        long documents;
        long skipped;
        long blank;
        long tokens;
        long bytes;
    }

    private static void write(BatchResult result, List<IndexedDatasetWriter> writers, PreprocessOptions options,
                              PrintStream console, Counts counts, ProgressBar bar) throws IOException {
        for (int i = 0; i < result.tokens().length; i++) {
            long lineNumber = result.firstLine() + i;
            if (result.problems()[i] != null) {
                if (options.onBadLine() == PreprocessOptions.BadLinePolicy.FAIL) {
                    throw new BadInputLineException(options.input(), lineNumber, result.problems()[i]);
                }
                counts.skipped++;
                String report = "file " + options.input() + " line " + lineNumber + ": " + result.problems()[i] + " (skipped)";
                if (console != null) {
                    if (bar != null) {
                        bar.clear();
                    }
                    console.println(report);
                } else {
                    LOG.warn(report);
                }
                continue;
            }
            int[][] perKey = result.tokens()[i];
            if (perKey == null) {
                counts.blank++;
                continue;
            }
            for (int k = 0; k < perKey.length; k++) {
                IndexedDatasetWriter w = writers.get(k);
                if (perKey[k].length > 0) {
                    w.addSequence(perKey[k]);
                    counts.tokens += perKey[k].length;
                }
                w.endDocument();
            }
            counts.documents++;
        }
        counts.bytes += result.bytes();
    }

    private static void progress(ProgressBar bar, Counts counts, long totalMegabytes) {
        if (bar != null) {
            bar.update(counts.bytes / 1_000_000, totalMegabytes, String.format(java.util.Locale.ROOT, "%,d docs", counts.documents));
        }
    }
}
