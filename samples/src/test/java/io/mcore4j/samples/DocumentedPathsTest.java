package io.mcore4j.samples;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;

/**
 * Every repository path the README and the documents under {@code docs/} name must exist in the
 * repository, so a fresh clone can follow them. A path is a Markdown link target, or a word inside
 * back-quotes or a fenced code block that starts with one of the repository's top-level entries (or with {@code ../}, which
 * leaves the repository and always fails), or a bare {@code .md/.py/.sh} file name (which must exist
 * somewhere in the repository). Folders the build or the commands create ({@code runs/}, {@code target/}, {@code .gpu/},
 * {@code checkpoints/}) are exempt, and so is a path through a module's {@code target/} (the distribution,
 * {@code samples/target/mcore4j}).
 */
class DocumentedPathsTest {
    private static final Pattern CODE = Pattern.compile("`([^`]+)`");
    private static final Pattern LINK = Pattern.compile("\\]\\(([^)\\s#]+)(#[^)]*)?\\)");
    private static final Pattern PATH = Pattern.compile("(\\.\\./)*[\\w.-]+(/[\\w.*-]+)*/?");
    private static final Set<String> GENERATED = Set.of("runs", "target", ".gpu", "checkpoints");

    @Test
    void everyDocumentedPathExists() throws IOException {
        Path root = repositoryRoot();
        List<Path> docs = new ArrayList<>(List.of(root.resolve("README.md")));
        try (Stream<Path> s = Files.list(root.resolve("docs"))) {
            s.filter(p -> p.toString().endsWith(".md")).sorted().forEach(docs::add);
        }
        Set<String> missing = new TreeSet<>();
        int checked = 0;
        for (Path doc : docs) {
            String text = Files.readString(doc);
            Path base = doc.getParent();
            for (String target : matches(LINK, text)) {
                if (target.contains(":")) {
                    continue; // https:, mailto:
                }
                checked++;
                if (!Files.exists(base.resolve(target).normalize()) || leaves(root, base.resolve(target))) {
                    missing.add(root.relativize(doc) + ": link " + target);
                }
            }
            // fenced blocks: every word is code; elsewhere, the back-quoted spans
            List<String> codes = new ArrayList<>();
            String[] parts = text.split("(?m)^\\s*```.*$");
            StringBuilder prose = new StringBuilder();
            for (int i = 0; i < parts.length; i++) {
                if (i % 2 == 1) {
                    codes.add(parts[i]);
                } else {
                    prose.append(parts[i]).append('\n');
                }
            }
            codes.addAll(matches(CODE, prose.toString()));
            for (String code : codes) {
                for (String word : code.split("\\s+")) {
                    String path = candidate(root, word);
                    if (path == null) {
                        continue;
                    }
                    checked++;
                    boolean exists = path.contains("/")
                            ? Files.exists(root.resolve(path.replace("*", "")))
                            : existsAnywhere(root, path);
                    if (path.startsWith("../") || !exists) {
                        missing.add(root.relativize(doc) + ": " + path);
                    }
                }
            }
        }
        assertTrue(checked > 10, "found only " + checked + " paths in " + docs + ": is the pattern broken?");
        assertEquals(Set.of(), missing, "documented paths that do not exist in the repository");
    }

    /** The repository path a back-quoted word names, or null when it names none. */
    private static String candidate(Path root, String word) {
        String w = word.replaceAll("^[\"'(]+|[\"'),.:;]+$", "");
        if (!PATH.matcher(w).matches() || w.startsWith("/")) {
            return null;
        }
        if (w.startsWith("../")) {
            return w;
        }
        int slash = w.indexOf('/');
        if (slash < 0) {
            return w.matches("[\\w.-]+\\.(md|py|sh)") ? w : null;
        }
        String first = w.substring(0, slash);
        if (GENERATED.contains(first) || !Files.exists(root.resolve(first)) || w.contains("/target/") || w.endsWith("/target")) {
            return null;
        }
        return w;
    }

    private static boolean existsAnywhere(Path root, String name) throws IOException {
        try (Stream<Path> s = Files.walk(root)) {
            return s.anyMatch(p -> p.getFileName() != null && p.getFileName().toString().equals(name)
                    && !p.toString().contains("/target/") && !p.toString().contains("/.git/"));
        }
    }

    private static boolean leaves(Path root, Path p) {
        return !p.normalize().startsWith(root);
    }

    private static List<String> matches(Pattern p, String text) {
        List<String> out = new ArrayList<>();
        Matcher m = p.matcher(text);
        while (m.find()) {
            out.add(m.group(1));
        }
        return out;
    }

    private static Path repositoryRoot() {
        Path dir = Path.of("").toAbsolutePath();
        while (dir != null && !Files.exists(dir.resolve("README.md"))) {
            dir = dir.getParent();
        }
        assertTrue(dir != null, "no README.md above " + Path.of("").toAbsolutePath());
        return dir;
    }
}
