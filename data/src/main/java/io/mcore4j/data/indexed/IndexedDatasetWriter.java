package io.mcore4j.data.indexed;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.util.Arrays;
import java.util.List;

/**
 * Writes a Megatron indexed dataset ({@code prefix.bin} + {@code prefix.idx}) byte for byte as Megatron does.
 *
 * <p>Tokens stream to the {@code .bin} as sequences are added; the index arrays (4 bytes per sequence plus
 * 8 per document) stay in memory until {@link #finish()} writes the {@code .idx}. Both files are written
 * under temporary names and renamed by {@link #finish()}, so an interrupted run never leaves a pair that
 * looks complete; {@link #close()} without {@code finish()} deletes them. Not thread-safe.
 *
 * <p>A document is the run of sequences added since the previous {@link #endDocument()}; plain GPT data adds
 * one sequence per document with {@link #addDocument(int[])}.
 */
public final class IndexedDatasetWriter implements AutoCloseable {
    private static final int BUFFER_BYTES = 1 << 20;

    private final Path prefix;
    private final DType dtype;
    private final boolean multimodal;
    private final Path binTemp;
    private final Path idxTemp;
    private final FileChannel binChannel;
    private final ByteBuffer buffer = ByteBuffer.allocateDirect(BUFFER_BYTES).order(ByteOrder.LITTLE_ENDIAN);

    private int[] lengths = new int[1024];
    private byte[] modes;
    private long[] documentIndices = new long[1024];
    private int sequenceCount;
    private int documentIndexCount = 1;
    private boolean finished;
    private boolean closed;

    private IndexedDatasetWriter(Path prefix, DType dtype, boolean multimodal) throws IOException {
        this.prefix = prefix;
        this.dtype = dtype;
        this.multimodal = multimodal;
        this.modes = multimodal ? new byte[1024] : null;
        this.binTemp = DatasetFiles.withSuffix(prefix, ".bin.partial");
        this.idxTemp = DatasetFiles.withSuffix(prefix, ".idx.partial");
        this.binChannel = FileChannel.open(binTemp, StandardOpenOption.CREATE, StandardOpenOption.WRITE,
                StandardOpenOption.TRUNCATE_EXISTING);
    }

    /**
     * Starts a dataset without sequence modes.
     *
     * @param prefix path prefix without extension; its directory must exist
     * @param dtype token type
     * @return the writer
     * @throws IOException if the temporary {@code .bin} cannot be created
     */
    public static IndexedDatasetWriter create(Path prefix, DType dtype) throws IOException {
        return create(prefix, dtype, false);
    }

    /**
     * Starts a dataset.
     *
     * @param prefix path prefix without extension; its directory must exist
     * @param dtype token type
     * @param multimodal whether each sequence carries an int8 mode
     * @return the writer
     * @throws IOException if the temporary {@code .bin} cannot be created
     */
    public static IndexedDatasetWriter create(Path prefix, DType dtype, boolean multimodal) throws IOException {
        return new IndexedDatasetWriter(prefix, dtype, multimodal);
    }

    /**
     * Merges datasets into one: documents of the first input, then of the second, and so on.
     *
     * @param inputs prefixes of the inputs, all of one dtype
     * @param output prefix of the merged dataset
     * @throws IOException if an input cannot be read, is corrupt, or has another dtype
     */
    public static void merge(List<Path> inputs, Path output) throws IOException {
        if (inputs.isEmpty()) {
            throw new IllegalArgumentException("merge needs at least one input");
        }
        DType dtype;
        boolean multimodal;
        try (IndexedDatasetReader first = IndexedDatasetReader.open(inputs.get(0))) {
            dtype = first.dtype();
            multimodal = first.header().hasSequenceModes();
        }
        try (IndexedDatasetWriter writer = create(output, dtype, multimodal)) {
            for (Path input : inputs) {
                writer.append(input);
            }
            writer.finish();
        }
    }

    /**
     * Token type of this dataset.
     *
     * @return the dtype
     */
    public DType dtype() {
        return dtype;
    }

    /**
     * Sequences added so far.
     *
     * @return the count
     */
    public long sequenceCount() {
        return sequenceCount;
    }

    /**
     * Documents ended so far.
     *
     * @return the count
     */
    public long documentCount() {
        return documentIndexCount - 1L;
    }

    /**
     * Adds one sequence of integer tokens (mode 0 for multimodal datasets).
     *
     * @param tokens the tokens
     * @throws IllegalArgumentException if a token does not fit the dtype, naming it and its position
     * @throws IOException if the {@code .bin} cannot be written
     */
    public void addSequence(int[] tokens) throws IOException {
        addSequence(tokens, (byte) 0);
    }

    /**
     * Adds one sequence of integer tokens with a mode.
     *
     * @param tokens the tokens
     * @param mode the sequence mode (ignored unless the dataset is multimodal)
     * @throws IllegalArgumentException if a token does not fit the dtype
     * @throws IOException if the {@code .bin} cannot be written
     */
    public void addSequence(int[] tokens, byte mode) throws IOException {
        checkOpen();
        for (int k = 0; k < tokens.length; k++) {
            ensureRoom();
            put(tokens[k], k);
        }
        recordSequence(tokens.length, mode);
    }

    /**
     * Adds one sequence of long values.
     *
     * @param values the values
     * @throws IllegalArgumentException if a value does not fit the dtype
     * @throws IOException if the {@code .bin} cannot be written
     */
    public void addSequence(long[] values) throws IOException {
        checkOpen();
        for (int k = 0; k < values.length; k++) {
            ensureRoom();
            put(values[k], k);
        }
        recordSequence(values.length, (byte) 0);
    }

    /**
     * Adds one sequence of floating-point values to a float32 or float64 dataset.
     *
     * @param values the values
     * @throws IllegalArgumentException if the dataset has an integer dtype
     * @throws IOException if the {@code .bin} cannot be written
     */
    public void addSequence(double[] values) throws IOException {
        checkOpen();
        if (!dtype.isFloatingPoint()) {
            throw new IllegalArgumentException("cannot add floating-point values to a " + dtype + " dataset");
        }
        for (double v : values) {
            ensureRoom();
            dtype.putDouble(buffer, v);
        }
        recordSequence(values.length, (byte) 0);
    }

    /**
     * Ends the current document: every sequence added since the previous call belongs to it. Ending a
     * document without sequences records an empty document, as Megatron does for empty texts.
     */
    public void endDocument() {
        checkOpen();
        if (documentIndexCount == documentIndices.length) {
            documentIndices = Arrays.copyOf(documentIndices, grow(documentIndices.length));
        }
        documentIndices[documentIndexCount++] = sequenceCount;
    }

    /**
     * Adds a document made of one sequence.
     *
     * @param tokens the tokens
     * @throws IOException if the {@code .bin} cannot be written
     */
    public void addDocument(int[] tokens) throws IOException {
        addSequence(tokens);
        endDocument();
    }

    /**
     * Appends every document of an existing dataset, copying its {@code .bin} bytes unchanged.
     *
     * @param input prefix of a dataset of the same dtype (and with sequence modes if this one has them)
     * @throws IOException if the input cannot be read, is corrupt or does not match
     * @throws IllegalStateException if sequences were added since the last {@link #endDocument()}
     */
    public void append(Path input) throws IOException {
        checkOpen();
        if (sequenceCount != documentIndices[documentIndexCount - 1]) {
            throw new IllegalStateException("end the current document before appending " + input);
        }
        flush();
        try (IndexedDatasetReader reader = IndexedDatasetReader.open(input, new IndexedDatasetReader.Options(
                MappedFile.DEFAULT_SEGMENT_BYTES, MappedFile.DEFAULT_OVERLAP_BYTES, true, multimodal));
             FileChannel source = FileChannel.open(DatasetFiles.bin(input), StandardOpenOption.READ)) {
            if (reader.dtype() != dtype) {
                throw new IllegalArgumentException("cannot append " + input + " of dtype " + reader.dtype() + " to a " + dtype + " dataset");
            }
            int base = sequenceCount;
            long expectedPointer = 0;
            boolean contiguous = true;
            for (long s = 0; s < reader.sequenceCount(); s++) {
                int length = reader.sequenceLength(s);
                contiguous &= reader.sequencePointer(s) == expectedPointer;
                expectedPointer += (long) length * dtype.size();
                recordSequence(length, multimodal ? reader.sequenceMode(s) : 0);
            }
            for (long j = 1; j <= reader.documentCount(); j++) {
                if (documentIndexCount == documentIndices.length) {
                    documentIndices = Arrays.copyOf(documentIndices, grow(documentIndices.length));
                }
                documentIndices[documentIndexCount++] = base + reader.documentIndex(j);
            }
            if (contiguous) {
                transfer(source, 0, expectedPointer);
            } else {
                for (long s = 0; s < reader.sequenceCount(); s++) {
                    transfer(source, reader.sequencePointer(s), (long) reader.sequenceLength(s) * dtype.size());
                }
            }
        }
    }

    private void transfer(FileChannel source, long position, long count) throws IOException {
        long done = 0;
        while (done < count) {
            long n = source.transferTo(position + done, count - done, binChannel);
            if (n <= 0) {
                throw new IOException("could not copy bytes " + (position + done) + ".." + (position + count) + " of " + source);
            }
            done += n;
        }
    }

    /**
     * Writes the {@code .idx}, then moves both files to their final names.
     *
     * @throws IllegalStateException if sequences were added since the last {@link #endDocument()}
     * @throws IOException if a file cannot be written or renamed
     */
    public void finish() throws IOException {
        checkOpen();
        if (sequenceCount != documentIndices[documentIndexCount - 1]) {
            throw new IllegalStateException((sequenceCount - documentIndices[documentIndexCount - 1])
                    + " sequences were added after the last endDocument()");
        }
        flush();
        binChannel.force(false);
        binChannel.close();
        writeIndex();
        Files.move(binTemp, DatasetFiles.bin(prefix), StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
        Files.move(idxTemp, DatasetFiles.idx(prefix), StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
        finished = true;
    }

    private void writeIndex() throws IOException {
        try (FileChannel out = FileChannel.open(idxTemp, StandardOpenOption.CREATE, StandardOpenOption.WRITE,
                StandardOpenOption.TRUNCATE_EXISTING)) {
            ByteBuffer b = ByteBuffer.allocate(BUFFER_BYTES).order(ByteOrder.LITTLE_ENDIAN);
            b.put(IndexHeader.magic()).putLong(IndexHeader.VERSION).put((byte) dtype.code())
                    .putLong(sequenceCount).putLong(documentIndexCount);
            for (int i = 0; i < sequenceCount; i++) {
                b = drainIfFull(out, b, 4);
                b.putInt(lengths[i]);
            }
            long pointer = 0;
            for (int i = 0; i < sequenceCount; i++) {
                b = drainIfFull(out, b, 8);
                b.putLong(pointer);
                pointer += (long) lengths[i] * dtype.size();
            }
            for (int j = 0; j < documentIndexCount; j++) {
                b = drainIfFull(out, b, 8);
                b.putLong(documentIndices[j]);
            }
            if (multimodal) {
                for (int i = 0; i < sequenceCount; i++) {
                    b = drainIfFull(out, b, 1);
                    b.put(modes[i]);
                }
            }
            b.flip();
            while (b.hasRemaining()) {
                out.write(b);
            }
            out.force(false);
        }
    }

    private static ByteBuffer drainIfFull(FileChannel out, ByteBuffer b, int needed) throws IOException {
        if (b.remaining() < needed) {
            b.flip();
            while (b.hasRemaining()) {
                out.write(b);
            }
            b.clear();
        }
        return b;
    }

    private void put(long value, int position) {
        try {
            dtype.putLong(buffer, value);
        } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException("token at position " + position + " of sequence " + sequenceCount + ": " + e.getMessage(), e);
        }
    }

    private void ensureRoom() throws IOException {
        if (buffer.remaining() < 8) {
            flush();
        }
    }

    private void flush() throws IOException {
        buffer.flip();
        while (buffer.hasRemaining()) {
            binChannel.write(buffer);
        }
        buffer.clear();
    }

    private void recordSequence(int length, byte mode) {
        if (sequenceCount == Integer.MAX_VALUE - 8) {
            throw new IllegalStateException("one dataset holds at most " + sequenceCount + " sequences; write several and merge");
        }
        if (sequenceCount == lengths.length) {
            lengths = Arrays.copyOf(lengths, grow(lengths.length));
            if (multimodal) {
                modes = Arrays.copyOf(modes, lengths.length);
            }
        }
        lengths[sequenceCount] = length;
        if (multimodal) {
            modes[sequenceCount] = mode;
        }
        sequenceCount++;
    }

    private static int grow(int length) {
        return (int) Math.min(Integer.MAX_VALUE - 8L, length + (length >> 1) + 16L);
    }

    private void checkOpen() {
        if (finished || closed) {
            throw new IllegalStateException("writer for " + prefix + " is " + (finished ? "finished" : "closed"));
        }
    }

    /**
     * Releases the files; if {@link #finish()} was not called, deletes the temporary files so that no partial
     * dataset remains.
     *
     * @throws IOException if a temporary file cannot be deleted
     */
    @Override
    public void close() throws IOException {
        if (closed) {
            return;
        }
        closed = true;
        if (!finished) {
            binChannel.close();
            Files.deleteIfExists(binTemp);
            Files.deleteIfExists(idxTemp);
        }
    }
}
