package io.mcore4j.samples.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.List;

import org.junit.jupiter.api.Test;

/**
 * Every command's {@code --help} prints its usage and nothing else: picocli formats each description with
 * {@link String#format}, and a description with a bare {@code %} (a Jinja tag such as {@code {% generation %}})
 * printed a "picocli WARN ... Could not format" line three times before the usage.
 */
class CommandHelpTest {
    private static final List<String> COMMANDS = List.of("demo", "pretrain-gpt", "generate-gpt", "serve-gpt", "preprocess",
            "convert-hf", "export-hf", "plan", "benchmark", "launch");

    @Test
    void everyCommandsHelpPrintsWithoutPicocliWarnings() {
        for (String command : COMMANDS) {
            ByteArrayOutputStream out = new ByteArrayOutputStream();
            ByteArrayOutputStream err = new ByteArrayOutputStream();
            PrintStream systemErr = System.err;
            int code;
            try (PrintStream o = new PrintStream(out, true, StandardCharsets.UTF_8);
                 PrintStream e = new PrintStream(err, true, StandardCharsets.UTF_8)) {
                System.setErr(e); // picocli's tracer writes to System.err
                code = Mcore4jCli.execute(new String[] {command, "--help"}, o, e);
            } finally {
                System.setErr(systemErr);
            }
            String printed = out.toString(StandardCharsets.UTF_8) + err.toString(StandardCharsets.UTF_8);
            assertEquals(0, code, command + " --help: " + printed);
            assertFalse(printed.contains("picocli WARN"), command + " --help warned:\n" + printed);
        }
    }
}
