package io.mcore4j.samples.pretrain;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Set;
import java.util.TreeSet;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import org.junit.jupiter.api.Test;
import picocli.CommandLine;

/**
 * docs/megatron-flags.md's list of pretrain-gpt flags (moved there from the README) and its list of the
 * Megatron script flags are together exactly the command's options.
 */
class PretrainGptReadmeTest {
    @Test
    void theReadmeListsEveryFlagAndNoOther() throws Exception {
        Path page = Path.of("..", "docs", "megatron-flags.md");
        Set<String> listed = new TreeSet<>();
        listed(page, "<!-- flags:", "<!-- end of flags -->", listed);
        listed(page, "<!-- megatron flags:", "<!-- end of megatron flags -->", listed);
        Set<String> options = new TreeSet<>();
        new CommandLine(new PretrainArgs()).getCommandSpec().options()
                .forEach(o -> options.add(o.longestName().replace("--[no-]", "--")));
        assertEquals(options, listed, "docs/megatron-flags.md's pretrain-gpt flag lists");
    }

    /** Adds the flags quoted between two markers of a file. */
    private static void listed(Path file, String from, String to, Set<String> listed) throws Exception {
        String text = Files.readString(file);
        int start = text.indexOf(from);
        int end = text.indexOf(to);
        assertTrue(start >= 0 && end > start, file + " has the markers " + from + " and " + to);
        String list = text.substring(start, end).replace("--[no-]", "--");
        Matcher m = Pattern.compile("`(--[a-z0-9_-]+)").matcher(list);
        while (m.find()) {
            listed.add(m.group(1));
        }
    }
}
