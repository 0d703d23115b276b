package io.mcore4j.samples.pretrain;

import io.mcore4j.data.gpt.DataBlend;
import io.mcore4j.hf.HfCheckpoint;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Set;

/**
 * Checks of the flags that name files and directories, made before anything is allocated so that a
 * missing input or an unwritable output fails at once with one line naming the flag, not after
 * training has started. Inputs must exist: each {@code --data-path} prefix's {@code .bin} and
 * {@code .idx} files, the {@code --corpus-from-sources} directory, the {@code --load-hf} directory (its
 * {@code config.json} understood, every tensor present with its shape) and the {@code --auto-layout-cluster} file; {@code --load} may be missing or
 * empty (training starts from scratch) but not a file. Outputs ({@code --save}, {@code --metrics-dir},
 * {@code --tensorboard-dir}, {@code --save-hf}) are created when missing and must accept a new file.
 */
final class PathFlags {
    private PathFlags() {}

    /**
     * @param a the flags
     * @throws IllegalArgumentException naming the flag, the path and what was expected
     */
    static void check(PretrainArgs a) {
        if (!a.dataPath.isEmpty() && !a.sft.enabled) { // --sft reads a JSON Lines file (SftOptions checks it)
            dataPath(a.dataPath);
        }
        if (a.corpus != null && !Files.isDirectory(a.corpus)) {
            throw new IllegalArgumentException("--corpus-from-sources " + a.corpus + (Files.exists(a.corpus)
                    ? " is a file; expected a directory of sources" : " does not exist; expected a directory of sources"));
        }
        if (a.load != null && Files.exists(a.load) && !Files.isDirectory(a.load)) {
            throw new IllegalArgumentException("--load " + a.load + " is a file; expected a checkpoint directory (a --save"
                    + " directory of an earlier run)");
        }
        if (a.loadHf != null) {
            HfCheckpoint.openInput("--load-hf", a.loadHf, Set.of()).close(); // the config and every tensor's header
        }
        if (a.autoLayout && a.autoLayoutCluster != null && !Files.isRegularFile(a.autoLayoutCluster)) {
            throw new IllegalArgumentException("--auto-layout-cluster " + a.autoLayoutCluster
                    + (Files.exists(a.autoLayoutCluster) ? " is a directory" : " does not exist") + "; expected a cluster JSON file");
        }
        writableDirectory("--save", a.save);
        writableDirectory("--metrics-dir", a.metricsDir);
        writableDirectory("--tensorboard-dir", a.tensorboardDir);
        writableDirectory("--save-hf", a.saveHf);
    }

    /** Megatron's {@code [weight] prefix ...} syntax, then each prefix's two files. */
    private static void dataPath(List<String> tokens) {
        DataBlend blend;
        try {
            blend = DataBlend.parse(String.join(" ", tokens)); // as the dataset builder reads it
        } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException("--data-path " + String.join(" ", tokens) + ": " + e.getMessage(), e);
        }
        for (Path prefix : blend.prefixes()) {
            for (String ext : List.of(".bin", ".idx")) {
                Path file = Path.of(prefix + ext);
                if (!Files.isRegularFile(file) || !Files.isReadable(file)) {
                    String name = prefix.getFileName().toString();
                    String hint = name.endsWith(".bin") || name.endsWith(".idx")
                            ? " (give the prefix, without .bin or .idx)" : "";
                    throw new IllegalArgumentException("--data-path " + prefix + ": " + file
                            + (Files.exists(file) ? " is not a readable file" : " does not exist")
                            + "; expected the .bin and .idx files of a preprocessed dataset" + hint);
                }
            }
        }
    }

    /** Creates {@code dir} when missing and proves that a file can be created in it. */
    private static void writableDirectory(String flag, Path dir) {
        if (dir == null) {
            return;
        }
        for (Path p = dir.toAbsolutePath(); p != null; p = p.getParent()) {
            if (Files.exists(p) && !Files.isDirectory(p)) {
                throw new IllegalArgumentException(flag + " " + dir + (p.equals(dir.toAbsolutePath()) ? " is a file"
                        : ": " + p + " is a file") + "; expected a directory");
            }
        }
        try {
            Files.createDirectories(dir);
            Files.delete(Files.createTempFile(dir, ".write-check-", ".tmp"));
        } catch (IOException | UnsupportedOperationException | SecurityException e) {
            throw new IllegalArgumentException(flag + " " + dir + " is not a writable directory: " + reason(e), e);
        }
    }

    /** An I/O failure in a few words ({@code java.nio.file.AccessDeniedException: /x} becomes "access denied: /x"). */
    private static String reason(Exception e) {
        String kind = e.getClass().getSimpleName().replace("Exception", "")
                .replaceAll("([a-z])([A-Z])", "$1 $2").toLowerCase(java.util.Locale.ROOT);
        return e.getMessage() == null ? kind : kind + ": " + e.getMessage();
    }
}
