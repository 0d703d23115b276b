package io.mcore4j.samples.pretrain;

import io.mcore4j.data.indexed.DType;
import io.mcore4j.data.indexed.IndexedDatasetWriter;
import io.mcore4j.data.tokenizer.ByteLevelTokenizer;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.List;
import java.util.stream.Collectors;
import java.util.stream.Stream;

/**
 * Builds the demo's training corpus from a source tree: every Markdown and Java file under it
 * (build outputs, run outputs and VCS folders excluded), in sorted path order, one document per
 * file, tokenised byte-level with an end-of-document token, written in Megatron's indexed format.
 * The same tree always gives the same bytes.
 */
final class SourceCorpus {
    private SourceCorpus() {}

    /**
     * @param root the source tree
     * @param prefix output prefix; {@code prefix.bin} and {@code prefix.idx} are written atomically
     * @return number of documents
     * @throws IOException if reading or writing fails
     * @throws IllegalArgumentException naming --corpus-from-sources if the tree has no text files
     */
    static int build(Path root, Path prefix) throws IOException {
        List<Path> files;
        try (Stream<Path> walk = Files.walk(root)) {
            files = walk.filter(Files::isRegularFile)
                    .filter(p -> {
                        String name = p.getFileName().toString();
                        return name.endsWith(".md") || name.endsWith(".java");
                    })
                    .filter(p -> {
                        String rel = root.relativize(p).toString().replace('\\', '/');
                        return !rel.contains("target/") && !rel.startsWith("runs/") && !rel.startsWith(".")
                                && !rel.contains("/.");
                    })
                    .sorted()
                    .collect(Collectors.toList());
        }
        if (files.isEmpty()) {
            throw new IllegalArgumentException("--corpus-from-sources " + root + " holds no .md or .java files"
                    + " (build outputs, runs/ and hidden folders are skipped)");
        }
        Files.createDirectories(prefix.toAbsolutePath().getParent());
        ByteLevelTokenizer tokenizer = new ByteLevelTokenizer();
        int eod = tokenizer.endOfDocument().orElseThrow();
        Path temp = prefix.resolveSibling(prefix.getFileName() + ".tmp-" + ProcessHandle.current().pid());
        try (IndexedDatasetWriter writer = IndexedDatasetWriter.create(temp, DType.UINT16)) {
            for (Path file : files) {
                int[] ids = tokenizer.encode(Files.readString(file, StandardCharsets.UTF_8));
                int[] withEod = java.util.Arrays.copyOf(ids, ids.length + 1);
                withEod[ids.length] = eod;
                writer.addDocument(withEod);
            }
            writer.finish();
        }
        for (String ext : List.of(".bin", ".idx")) {
            Files.move(Path.of(temp + ext), Path.of(prefix + ext), StandardCopyOption.REPLACE_EXISTING,
                    StandardCopyOption.ATOMIC_MOVE);
        }
        return files.size();
    }
}
