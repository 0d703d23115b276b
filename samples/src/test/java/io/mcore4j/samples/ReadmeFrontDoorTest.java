package io.mcore4j.samples;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Set;
import java.util.TreeSet;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Collectors;
import java.util.stream.Stream;

import org.junit.jupiter.api.Test;

/**
 * Issue 38: the README is a front door, short enough to read, and every page under {@code docs/} can
 * be reached from it: each {@code docs/*.md} the README links exists, and each one that exists is
 * linked.
 */
class ReadmeFrontDoorTest {
    /** "Under 12 KB". */
    private static final long MAX_BYTES = 12 * 1024;
    private static final Pattern DOCS_LINK = Pattern.compile("\\]\\((docs/[^)#\\s]+\\.md)(#[^)]*)?\\)");

    @Test
    void theReadmeIsUnder12Kilobytes() throws IOException {
        long size = Files.size(root().resolve("README.md"));
        assertTrue(size < MAX_BYTES, "README.md has " + size + " bytes (expected under " + MAX_BYTES
                + "): move details to a page under docs/ and link it");
    }

    @Test
    void everyDocsPageIsLinkedFromTheReadmeAndEveryLinkedPageExists() throws IOException {
        Path root = root();
        Set<String> linked = new TreeSet<>();
        Matcher m = DOCS_LINK.matcher(Files.readString(root.resolve("README.md")));
        while (m.find()) {
            linked.add(m.group(1));
        }
        Set<String> pages;
        try (Stream<Path> s = Files.list(root.resolve("docs"))) {
            pages = s.filter(p -> p.getFileName().toString().endsWith(".md"))
                    .map(p -> "docs/" + p.getFileName()).collect(Collectors.toCollection(TreeSet::new));
        }
        assertTrue(pages.size() >= 10, "docs/ holds only " + pages);
        Set<String> missing = new TreeSet<>(linked);
        missing.removeAll(pages);
        assertEquals(Set.of(), missing, "README.md links pages that do not exist");
        Set<String> unlinked = new TreeSet<>(pages);
        unlinked.removeAll(linked);
        assertEquals(Set.of(), unlinked, "pages under docs/ that README.md does not link");
    }

    private static Path root() {
        Path dir = Path.of("").toAbsolutePath();
        while (dir != null && !Files.isDirectory(dir.resolve("docs"))) {
            dir = dir.getParent();
        }
        assertTrue(dir != null, "no docs/ above " + Path.of("").toAbsolutePath());
        return dir;
    }
}
