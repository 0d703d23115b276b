package io.mcore4j.samples.pretrain;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Set;
import java.util.TreeSet;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import org.junit.jupiter.api.Test;
import picocli.CommandLine;

/** The list of pretrain-gpt flags in docs/megatron-flags.md (moved there from the README) is exactly the command's options. */
class PretrainGptReadmeTest {
    @Test
    void theReadmeListsEveryFlagAndNoOther() throws Exception {
        Path readme = Path.of("..", "docs", "megatron-flags.md");
        String text = Files.readString(readme);
        int start = text.indexOf("<!-- flags:");
        int end = text.indexOf("<!-- end of flags -->");
        String list = text.substring(start, end).replace("--[no-]", "--");
        Set<String> listed = new TreeSet<>();
        Matcher m = Pattern.compile("`(--[a-z0-9_-]+)").matcher(list);
        while (m.find()) {
            listed.add(m.group(1));
        }
        Set<String> options = new TreeSet<>();
        new CommandLine(new PretrainArgs()).getCommandSpec().options()
                .forEach(o -> options.add(o.longestName().replace("--[no-]", "--")));
        assertEquals(options, listed, "docs/megatron-flags.md's pretrain-gpt flag list");
    }
}
