package io.mcore4j.data.indexed;

import java.nio.file.Path;

/**
 * Names of the two files of an indexed dataset, derived from a path prefix as Megatron does: the prefix
 * {@code data/books_text_document} names {@code data/books_text_document.idx} and {@code .bin}.
 */
public final class DatasetFiles {
    private DatasetFiles() {}

    /**
     * The index file of a prefix.
     *
     * @param prefix path prefix without extension
     * @return {@code prefix + ".idx"}
     */
    public static Path idx(Path prefix) {
        return withSuffix(prefix, ".idx");
    }

    /**
     * The data file of a prefix.
     *
     * @param prefix path prefix without extension
     * @return {@code prefix + ".bin"}
     */
    public static Path bin(Path prefix) {
        return withSuffix(prefix, ".bin");
    }

    /**
     * Appends a suffix to the last name of a path.
     *
     * @param prefix a path with at least one name
     * @param suffix text to append
     * @return the sibling path {@code prefix + suffix}
     */
    public static Path withSuffix(Path prefix, String suffix) {
        Path name = prefix.getFileName();
        if (name == null) {
            throw new IllegalArgumentException("dataset prefix " + prefix + " has no file name");
        }
        return prefix.resolveSibling(name + suffix);
    }
}
