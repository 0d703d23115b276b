package io.mcore4j.data.indexed;

import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.HexFormat;

/**
 * The fixed part of a {@code .idx} file and the layout of the arrays after it.
 *
 * <p>Layout (all little-endian): 9-byte magic {@code MMIDIDX\0\0}, uint64 version (1), uint8 dtype code,
 * uint64 sequence count {@code n}, uint64 document-index count {@code m}; then {@code n} int32 sequence
 * lengths, {@code n} int64 byte pointers into the {@code .bin}, {@code m} int64 document indices, and,
 * for multimodal datasets only, {@code n} int8 sequence modes. The header has no flag for the modes:
 * their presence shows in the file size.
 *
 * @param dtype token type of the {@code .bin}
 * @param sequenceCount number of sequences {@code n}
 * @param documentIndexCount number of document-index entries {@code m} (documents + 1)
 * @param hasSequenceModes whether the int8 mode array follows the document indices
 */
public record IndexHeader(DType dtype, long sequenceCount, long documentIndexCount, boolean hasSequenceModes) {
    /** The magic bytes at the start of every {@code .idx} file. */
    private static final byte[] MAGIC = "MMIDIDX\0\0".getBytes(StandardCharsets.US_ASCII);
    /** The only version Megatron writes. */
    public static final long VERSION = 1;
    /** Bytes before the sequence-length array. */
    public static final int SIZE = 34;

    /** Validates the counts. */
    public IndexHeader {
        if (dtype == null) {
            throw new IllegalArgumentException("dtype must not be null");
        }
        if (sequenceCount < 0 || documentIndexCount < 0) {
            throw new IllegalArgumentException("sequence count " + sequenceCount + " and document index count "
                    + documentIndexCount + " must not be negative");
        }
    }

    /**
     * A copy of the magic bytes.
     *
     * @return {@code MMIDIDX\0\0}
     */
    public static byte[] magic() {
        return MAGIC.clone();
    }

    /**
     * Offset of the int32 sequence lengths.
     *
     * @return {@value #SIZE}
     */
    public long lengthsOffset() {
        return SIZE;
    }

    /**
     * Offset of the int64 sequence pointers.
     *
     * @return byte offset
     */
    public long pointersOffset() {
        return SIZE + 4 * sequenceCount;
    }

    /**
     * Offset of the int64 document indices.
     *
     * @return byte offset
     */
    public long documentIndicesOffset() {
        return SIZE + 12 * sequenceCount;
    }

    /**
     * Offset of the int8 sequence modes (meaningful when {@link #hasSequenceModes()}).
     *
     * @return byte offset
     */
    public long modesOffset() {
        return documentIndicesOffset() + 8 * documentIndexCount;
    }

    /**
     * Size of a well-formed file with this header.
     *
     * @return bytes
     */
    public long fileSize() {
        return modesOffset() + (hasSequenceModes ? sequenceCount : 0);
    }

    /**
     * Reads and checks the header of a mapped {@code .idx} file, including that the arrays it announces fit
     * the file exactly.
     *
     * @param idx the mapped file
     * @param requireModes whether the caller expects a multimodal dataset
     * @return the header
     * @throws CorruptDatasetException naming the file and what is wrong
     */
    public static IndexHeader read(MappedFile idx, boolean requireModes) throws CorruptDatasetException {
        Path file = idx.path();
        long size = idx.size();
        if (size < SIZE) {
            throw new CorruptDatasetException(file, "header is truncated: " + size + " bytes, need " + SIZE);
        }
        byte[] magic = new byte[MAGIC.length];
        idx.slice(0, MAGIC.length).get(magic);
        if (!Arrays.equals(magic, MAGIC)) {
            throw new CorruptDatasetException(file, "bad magic 0x" + HexFormat.of().formatHex(magic)
                    + " (expected 0x" + HexFormat.of().formatHex(MAGIC) + ", \"MMIDIDX\\0\\0\")");
        }
        long version = idx.getLong(9);
        if (version != VERSION) {
            throw new CorruptDatasetException(file, "version " + Long.toUnsignedString(version) + " is unsupported (expected 1)");
        }
        int code = idx.getByte(17) & 0xFF;
        DType dtype;
        try {
            dtype = DType.fromCode(code);
        } catch (IllegalArgumentException e) {
            throw new CorruptDatasetException(file, e.getMessage());
        }
        long sequences = idx.getLong(18);
        long documents = idx.getLong(26);
        long arrays = SIZE;
        long withoutModes;
        try {
            if (sequences < 0 || documents < 0) {
                throw new ArithmeticException();
            }
            withoutModes = Math.addExact(arrays, Math.addExact(Math.multiplyExact(12, sequences), Math.multiplyExact(8, documents)));
        } catch (ArithmeticException e) {
            withoutModes = -1;
        }
        if (withoutModes < 0 || withoutModes > size) {
            throw new CorruptDatasetException(file, "sequence count " + Long.toUnsignedString(sequences) + " and document count "
                    + Long.toUnsignedString(documents) + " overrun the file: they need "
                    + (withoutModes < 0 ? "more than 2^63" : Long.toString(withoutModes)) + " bytes, the file has " + size);
        }
        boolean modes;
        if (size == withoutModes + sequences && sequences > 0) {
            modes = true;
        } else if (size == withoutModes) {
            modes = false;
        } else {
            throw new CorruptDatasetException(file, "size " + size + " does not match its header: " + sequences + " sequences and "
                    + documents + " document indices need " + withoutModes + " bytes, or " + (withoutModes + sequences)
                    + " with sequence modes");
        }
        if (requireModes && !modes && sequences > 0) {
            throw new CorruptDatasetException(file, "has no sequence modes although a multimodal dataset was requested");
        }
        if (documents < 1) {
            throw new CorruptDatasetException(file, "document count 0 is invalid (the document index always holds at least the leading 0)");
        }
        return new IndexHeader(dtype, sequences, documents, modes || (requireModes && sequences == 0));
    }
}
