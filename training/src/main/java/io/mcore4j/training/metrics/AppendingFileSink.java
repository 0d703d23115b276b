package io.mcore4j.training.metrics;

import java.io.BufferedOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.OpenOption;
import java.nio.file.Path;

/**
 * A sink that appends the records of each logged iteration to one file and flushes them together,
 * so that a crash loses at most the iteration being written. Owns the open stream from
 * {@link #open} until {@link #close}; I/O errors surface as {@link UncheckedIOException}s naming
 * the file. {@link JsonlMetricsSink} and {@link TensorBoardSink} differ only in the file they pick
 * and the bytes of a record.
 */
abstract class AppendingFileSink implements MetricsSink {
    /** Writes records to the open stream. */
    @FunctionalInterface
    interface Records {
        /**
         * @param out the sink's stream
         * @throws IOException if writing fails
         */
        void writeTo(OutputStream out) throws IOException;
    }

    private final String kind;
    private OutputStream out;
    private Path openFile;

    /** @param kind what the file is, in messages, e.g. {@code "metrics file"} */
    AppendingFileSink(String kind) {
        this.kind = kind;
    }

    /**
     * Opens {@code file} for writing.
     *
     * @param file the file
     * @param options as {@link Files#newOutputStream}
     * @throws IOException if it cannot be opened
     */
    final void open(Path file, OpenOption... options) throws IOException {
        this.out = new BufferedOutputStream(Files.newOutputStream(file, options));
        this.openFile = file;
    }

    /** @return whether {@link #open} succeeded and the sink is not closed */
    final boolean isOpen() {
        return out != null;
    }

    /**
     * Writes records and flushes them.
     *
     * @param records what to write
     * @throws UncheckedIOException naming the file if writing fails
     */
    final void append(Records records) {
        try {
            records.writeTo(out);
            out.flush();
        } catch (IOException e) {
            throw new UncheckedIOException("cannot write " + kind + " " + openFile, e);
        }
    }

    /** Closes the file, if open; idempotent. */
    @Override
    public void close() {
        if (out != null) {
            try {
                out.close();
            } catch (IOException e) {
                throw new UncheckedIOException("cannot close " + kind + " " + openFile, e);
            } finally {
                out = null;
            }
        }
    }
}
