package io.mcore4j.data.indexed;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.IntBuffer;
import java.nio.ShortBuffer;
import java.nio.file.Path;
import java.util.zip.CRC32C;

/**
 * Reads a Megatron indexed dataset ({@code prefix.idx} + {@code prefix.bin}) through memory maps.
 *
 * <p>The reader owns both mappings and their channels; {@link #close()} releases them and invalidates every
 * {@link TokenView} it returned. Opening checks the header and that the arrays fit the {@code .idx}; with
 * {@link Options#fullValidation()} (the default) it also checks every sequence length and pointer against
 * the {@code .bin} and that the document indices run from 0 to the sequence count without decreasing, so a
 * corrupt file fails at open with a {@link CorruptDatasetException} naming the file. Every access checks
 * its own sequence again, so a reader opened without full validation still never reads outside the files.
 *
 * <p>Sequences and documents are addressed with long indices. A document is the run of sequences between
 * two consecutive document indices; GPT data holds one sequence per document. Instances are safe for
 * concurrent reads.
 */
public final class IndexedDatasetReader implements AutoCloseable {
    private static final Logger LOG = LoggerFactory.getLogger(IndexedDatasetReader.class);

    /**
     * How a reader maps and checks its files.
     *
     * @param segmentBytes distance between mapped segment starts (see {@link MappedFile})
     * @param overlapBytes overlap between segments; token windows up to this size are never copied
     * @param fullValidation whether opening scans every pointer and document index
     * @param requireSequenceModes whether the dataset must be multimodal (carry int8 sequence modes)
     */
    public record Options(long segmentBytes, int overlapBytes, boolean fullValidation, boolean requireSequenceModes) {
        /** Default: 1 GiB segments, 64 MiB overlap, full validation, modes optional. */
        public static final Options DEFAULT = new Options(MappedFile.DEFAULT_SEGMENT_BYTES, MappedFile.DEFAULT_OVERLAP_BYTES, true, false);

        /** Validates the sizes. */
        public Options {
            if (segmentBytes < 8 || overlapBytes < 8) {
                throw new IllegalArgumentException("segment size " + segmentBytes + " and overlap " + overlapBytes + " must be >= 8");
            }
        }
    }

    private final Path prefix;
    private final MappedFile idx;
    private final MappedFile bin;
    private final IndexHeader header;
    private volatile Long indexChecksum;

    private IndexedDatasetReader(Path prefix, MappedFile idx, MappedFile bin, IndexHeader header) {
        this.prefix = prefix;
        this.idx = idx;
        this.bin = bin;
        this.header = header;
    }

    /**
     * Opens {@code prefix.idx} and {@code prefix.bin} with default options.
     *
     * @param prefix path prefix without extension
     * @return the reader
     * @throws CorruptDatasetException if a file contradicts the format
     * @throws IOException if a file cannot be opened
     */
    public static IndexedDatasetReader open(Path prefix) throws IOException {
        return open(prefix, Options.DEFAULT);
    }

    /**
     * Opens {@code prefix.idx} and {@code prefix.bin}.
     *
     * @param prefix path prefix without extension
     * @param options mapping and validation options
     * @return the reader
     * @throws CorruptDatasetException if a file contradicts the format
     * @throws IOException if a file cannot be opened
     */
    public static IndexedDatasetReader open(Path prefix, Options options) throws IOException {
        MappedFile idx = MappedFile.open(DatasetFiles.idx(prefix), options.segmentBytes(), options.overlapBytes());
        MappedFile bin = null;
        try {
            IndexHeader header = IndexHeader.read(idx, options.requireSequenceModes());
            bin = MappedFile.open(DatasetFiles.bin(prefix), options.segmentBytes(), options.overlapBytes());
            IndexedDatasetReader reader = new IndexedDatasetReader(prefix, idx, bin, header);
            if (options.fullValidation()) {
                reader.validate();
            }
            LOG.debug("opened {}: {} sequences, {} documents, {}", prefix, header.sequenceCount(), reader.documentCount(), header.dtype());
            return reader;
        } catch (IOException | RuntimeException e) {
            idx.close();
            if (bin != null) {
                bin.close();
            }
            throw e;
        }
    }

    private void validate() throws CorruptDatasetException {
        long n = header.sequenceCount();
        int itemSize = header.dtype().size();
        long tokens = 0;
        for (long i = 0; i < n; i++) {
            int length = idx.getInt(header.lengthsOffset() + 4 * i);
            long pointer = idx.getLong(header.pointersOffset() + 8 * i);
            checkSequence(i, length, pointer, itemSize);
            tokens += length;
        }
        long m = header.documentIndexCount();
        long first = idx.getLong(header.documentIndicesOffset());
        if (first != 0) {
            throw new CorruptDatasetException(idx.path(), "document index 0 is " + first + " (expected 0)");
        }
        long previous = 0;
        for (long j = 1; j < m; j++) {
            long value = idx.getLong(header.documentIndicesOffset() + 8 * j);
            if (value < previous || value > n) {
                throw new CorruptDatasetException(idx.path(), "document index " + j + " is " + value + " (expected "
                        + previous + ".." + n + ", non-decreasing)");
            }
            previous = value;
        }
        if (previous != n) {
            throw new CorruptDatasetException(idx.path(), "last document index is " + previous + " but there are " + n + " sequences");
        }
        if (tokens * itemSize < bin.size()) {
            LOG.warn("{}: {} trailing bytes after the last sequence are ignored", bin.path(), bin.size() - tokens * itemSize);
        }
    }

    private void checkSequence(long i, int length, long pointer, int itemSize) throws CorruptDatasetException {
        if (length < 0) {
            throw new CorruptDatasetException(idx.path(), "sequence " + i + " has negative length " + length);
        }
        if (pointer < 0 || pointer % itemSize != 0) {
            throw new CorruptDatasetException(idx.path(), "sequence " + i + " has pointer " + pointer
                    + " (expected a non-negative multiple of " + itemSize + ")");
        }
        if (pointer > bin.size() - (long) length * itemSize) {
            throw new CorruptDatasetException(bin.path(), "sequence " + i + " (pointer " + pointer + ", " + length + " tokens of "
                    + header.dtype() + ") ends past the end of the file (" + bin.size() + " bytes)");
        }
    }

    /**
     * The path prefix this reader was opened with.
     *
     * @return the prefix
     */
    public Path prefix() {
        return prefix;
    }

    /**
     * The parsed {@code .idx} header.
     *
     * @return the header
     */
    public IndexHeader header() {
        return header;
    }

    /**
     * Token type.
     *
     * @return the dtype
     */
    public DType dtype() {
        return header.dtype();
    }

    /**
     * Number of sequences.
     *
     * @return the count
     */
    public long sequenceCount() {
        return header.sequenceCount();
    }

    /**
     * Number of documents (one less than the document-index entries).
     *
     * @return the count
     */
    public long documentCount() {
        return header.documentIndexCount() - 1;
    }

    /**
     * Size of the {@code .bin} file.
     *
     * @return bytes
     */
    public long binSize() {
        return bin.size();
    }

    /**
     * Size of the {@code .idx} file.
     *
     * @return bytes
     */
    public long idxSize() {
        return idx.size();
    }

    /**
     * CRC-32C of the whole {@code .idx} file, computed on first call: a fingerprint of the sequence lengths
     * and document boundaries, which is all that derived indices (such as GPT sample orders) depend on.
     *
     * @return the checksum
     */
    public long indexChecksum() {
        Long value = indexChecksum;
        if (value == null) {
            CRC32C crc = new CRC32C();
            int step = 1 << 24;
            for (long p = 0; p < idx.size(); p += step) {
                crc.update(idx.slice(p, (int) Math.min(step, idx.size() - p)));
            }
            value = crc.getValue();
            indexChecksum = value;
        }
        return value;
    }

    /**
     * Token count of one sequence.
     *
     * @param sequence sequence index
     * @return its length
     */
    public int sequenceLength(long sequence) {
        checkIndex(sequence, header.sequenceCount(), "sequence");
        return idx.getInt(header.lengthsOffset() + 4 * sequence);
    }

    /**
     * Byte offset of one sequence in the {@code .bin}.
     *
     * @param sequence sequence index
     * @return its pointer
     */
    public long sequencePointer(long sequence) {
        checkIndex(sequence, header.sequenceCount(), "sequence");
        return idx.getLong(header.pointersOffset() + 8 * sequence);
    }

    /**
     * Mode of one sequence of a multimodal dataset.
     *
     * @param sequence sequence index
     * @return its int8 mode
     * @throws IllegalStateException if the dataset has no modes
     */
    public byte sequenceMode(long sequence) {
        if (!header.hasSequenceModes()) {
            throw new IllegalStateException("dataset " + prefix + " has no sequence modes");
        }
        checkIndex(sequence, header.sequenceCount(), "sequence");
        return idx.getByte(header.modesOffset() + sequence);
    }

    /**
     * One raw entry of the document index: entry 0 is 0, entry {@code d + 1} is the sequence at which
     * document {@code d} ends (exclusive).
     *
     * @param entry index in {@code [0, documentCount()]}
     * @return the sequence index
     */
    public long documentIndex(long entry) {
        checkIndex(entry, header.documentIndexCount(), "document index entry");
        long value = idx.getLong(header.documentIndicesOffset() + 8 * entry);
        if (value < 0 || value > header.sequenceCount()) {
            throw new IllegalStateException("file " + idx.path() + ": document index " + entry + " is " + value
                    + " (expected 0.." + header.sequenceCount() + ")");
        }
        return value;
    }

    /**
     * All tokens of one sequence.
     *
     * @param sequence sequence index
     * @return a view into the map
     */
    public TokenView sequence(long sequence) {
        return sequence(sequence, 0, sequenceLength(sequence));
    }

    /**
     * A window of one sequence.
     *
     * @param sequence sequence index
     * @param offset first token, relative to the sequence
     * @param length number of tokens
     * @return a view into the map (a copy only if the window crosses a segment start and is longer than the
     *     overlap)
     * @throws IndexOutOfBoundsException if the window is not inside the sequence
     * @throws IllegalStateException if the index points outside the {@code .bin} (a corrupt file opened
     *     without full validation)
     */
    public TokenView sequence(long sequence, int offset, int length) {
        int sequenceLength = sequenceLength(sequence);
        long pointer = sequencePointer(sequence);
        if (offset < 0 || length < 0 || offset > sequenceLength - length) {
            throw new IndexOutOfBoundsException("window [" + offset + ", " + ((long) offset + length) + ") is outside sequence "
                    + sequence + " of length " + sequenceLength);
        }
        int itemSize = header.dtype().size();
        try {
            checkSequence(sequence, sequenceLength, pointer, itemSize);
        } catch (CorruptDatasetException e) {
            throw new IllegalStateException(e.getMessage(), e);
        }
        long bytes = (long) length * itemSize;
        if (bytes > Integer.MAX_VALUE) {
            throw new IllegalArgumentException("window of " + length + " tokens exceeds 2 GiB; read it in parts");
        }
        return new TokenView(bin.slice(pointer + (long) offset * itemSize, (int) bytes), header.dtype(), length);
    }

    /**
     * Number of tokens of one document (the sum over its sequences).
     *
     * @param document document index
     * @return token count
     */
    public long documentLength(long document) {
        long end = documentEnd(document);
        long total = 0;
        for (long s = documentIndex(document); s < end; s++) {
            total += sequenceLength(s);
        }
        return total;
    }

    /**
     * Copies a window of one document's tokens (which may span several sequences) into an int array.
     *
     * @param document document index
     * @param offset first token, relative to the document
     * @param length number of tokens
     * @param destination target array
     * @param position first index written
     * @throws IndexOutOfBoundsException if the window is not inside the document
     * @throws java.io.UncheckedIOException naming the {@code .bin} if it was truncated on disk after it
     *     was opened (see {@link MappedFile#requireOnDisk})
     */
    public void readDocument(long document, long offset, int length, int[] destination, int position) {
        long end = documentEnd(document);
        long skip = offset;
        int remaining = length;
        if (offset < 0 || length < 0) {
            throw new IndexOutOfBoundsException("window offset " + offset + " and length " + length + " must not be negative");
        }
        for (long s = documentIndex(document); s < end && remaining > 0; s++) {
            int sequenceLength = sequenceLength(s);
            if (skip >= sequenceLength) {
                skip -= sequenceLength;
                continue;
            }
            int take = (int) Math.min(remaining, sequenceLength - skip);
            TokenView view = sequence(s, (int) skip, take);
            bin.requireOnDisk(sequencePointer(s) + skip * header.dtype().size(), (long) take * header.dtype().size());
            try {
                view.copyTo(destination, position);
            } catch (InternalError e) {
                throw bin.faulted(e);
            }
            position += take;
            remaining -= take;
            skip = 0;
        }
        if (remaining > 0) {
            throw new IndexOutOfBoundsException("window [" + offset + ", " + (offset + length) + ") is outside document " + document);
        }
    }

    /**
     * Checks that every token id of the dataset lies in {@code [0, vocabularySize)}: a model's
     * embedding has no row for any other id (libtorch fails on one at tensor-parallel size 1, and at
     * larger sizes the vocabulary-parallel embedding would silently map it to zeros). One sequential
     * pass over the memory-mapped {@code .bin}, no copy; it returns at once when the dtype cannot hold
     * an id outside the range (uint16 data and a vocabulary of at least 65,536).
     *
     * @param vocabularySize the model's vocabulary size (e.g. {@code --vocab-size}), at least 1
     * @throws CorruptDatasetException naming the {@code .bin}, the first offending id, its document,
     *     its position in the document and the vocabulary size
     * @throws IllegalArgumentException if {@code vocabularySize < 1}
     * @throws java.io.UncheckedIOException naming the {@code .bin} if it was truncated after it was opened
     * @throws UnsupportedOperationException for floating-point data, which holds no token ids
     */
    public void checkTokenIds(long vocabularySize) throws CorruptDatasetException {
        if (vocabularySize < 1) {
            throw new IllegalArgumentException("vocabulary size " + vocabularySize + " must be at least 1");
        }
        DType dtype = header.dtype();
        if (dtype.isFloatingPoint()) {
            throw new UnsupportedOperationException("dataset " + prefix + " holds " + dtype + " values, not token ids");
        }
        if (dtype.minValue() >= 0 && dtype.maxValue() < vocabularySize) {
            return;
        }
        int itemSize = dtype.size();
        final int chunk = 1 << 20;
        for (long d = 0; d < documentCount(); d++) {
            long position = 0;
            for (long s = documentIndex(d), end = documentIndex(d + 1); s < end; s++) {
                int length = sequenceLength(s);
                for (int offset = 0; offset < length; offset += chunk) {
                    int n = Math.min(chunk, length - offset);
                    ByteBuffer bytes = sequence(s, offset, n).buffer();
                    bin.requireOnDisk(sequencePointer(s) + (long) offset * itemSize, (long) n * itemSize);
                    int bad;
                    try {
                        bad = firstOutside(bytes, dtype, n, vocabularySize);
                    } catch (InternalError e) {
                        throw bin.faulted(e);
                    }
                    if (bad >= 0) {
                        long id = dtype.getLong(bytes, bad * itemSize);
                        throw new CorruptDatasetException(bin.path(), "token id " + id + " at position "
                                + (position + offset + bad) + " of document " + d + " (sequence " + s + ") is outside the "
                                + "vocabulary [0, " + vocabularySize + ")");
                    }
                }
                position += length;
            }
        }
    }

    /** Index of the first of {@code n} ids in {@code bytes} outside {@code [0, limit)}, or -1. */
    private static int firstOutside(ByteBuffer bytes, DType dtype, int n, long limit) {
        switch (dtype) {
            case UINT16 -> {
                ShortBuffer ids = bytes.order(ByteOrder.LITTLE_ENDIAN).asShortBuffer();
                for (int k = 0; k < n; k++) {
                    if ((ids.get(k) & 0xFFFF) >= limit) {
                        return k;
                    }
                }
            }
            case INT32 -> {
                IntBuffer ids = bytes.order(ByteOrder.LITTLE_ENDIAN).asIntBuffer();
                for (int k = 0; k < n; k++) {
                    int id = ids.get(k);
                    if (id < 0 || id >= limit) {
                        return k;
                    }
                }
            }
            default -> {
                int size = dtype.size();
                for (int k = 0; k < n; k++) {
                    long id = dtype.getLong(bytes, k * size);
                    if (id < 0 || id >= limit) {
                        return k;
                    }
                }
            }
        }
        return -1;
    }

    private long documentEnd(long document) {
        checkIndex(document, documentCount(), "document");
        return documentIndex(document + 1);
    }

    private static void checkIndex(long index, long count, String what) {
        if (index < 0 || index >= count) {
            throw new IndexOutOfBoundsException(what + " " + index + " is outside [0, " + count + ")");
        }
    }

    @Override
    public void close() throws IOException {
        try {
            idx.close();
        } finally {
            bin.close();
        }
    }
}
