package io.mcore4j.samples.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The built distribution's {@code bin/mcore4j}, run as a user runs it: as a process, from a working
 * directory outside the repository. Runs in the {@code integration-test} phase, after {@code package}
 * has assembled {@code target/mcore4j} (the system property {@code mcore4j.distribution} names it).
 */
class Mcore4jScriptIT {
    private static Path script;

    @TempDir
    Path work;

    /** A finished process: exit code, standard output and standard error. */
    private record Result(int code, String out, String err) {
        List<String> errLines() {
            return err.isEmpty() ? List.of() : List.of(err.split("\n"));
        }
    }

    @BeforeAll
    static void findTheScript() {
        String dist = System.getProperty("mcore4j.distribution");
        // set by the pom's distribution-test execution only; elsewhere (the test phase, -Dtest=...) there is no distribution yet
        assumeTrue(dist != null, "the system property mcore4j.distribution is not set: runs in Maven's integration-test phase");
        script = Path.of(dist, "bin", "mcore4j");
        assertTrue(Files.isExecutable(script), script + " is missing or not executable: has package run?");
    }

    @Test
    void pretrainGptWithABadFlagPrintsExactlyOneLineAndExitsWithTwo() throws Exception {
        Result r = run(script, Map.of(), "pretrain-gpt", "--no-such-flag", "3");
        assertEquals(2, r.code(), r.err());
        assertEquals("", r.out());
        assertEquals(1, r.errLines().size(), r.err());
        assertTrue(r.err().startsWith("pretrain-gpt: ") && r.err().contains("--no-such-flag"), r.err());

        Result value = run(script, Map.of(), "pretrain-gpt", "--tensor-model-parallel-size", "two");
        assertEquals(2, value.code(), value.err());
        assertEquals(1, value.errLines().size(), value.err());
        assertTrue(value.err().contains("--tensor-model-parallel-size") && value.err().contains("two"), value.err());
    }

    @Test
    void helpListsEveryCommandAndAnUnknownOneIsOneLineWithExitTwo() throws Exception {
        Result help = run(script, Map.of(), "--help");
        assertEquals(0, help.code(), help.err());
        for (String command : List.of("demo", "pretrain-gpt", "generate-gpt", "serve-gpt", "preprocess", "convert-hf", "export-hf", "plan",
                "benchmark", "launch")) {
            assertTrue(help.out().contains("\n  " + command + " "), command + " missing from:\n" + help.out());
        }
        Result unknown = run(script, Map.of(), "pretrain");
        assertEquals(2, unknown.code());
        assertEquals(List.of("mcore4j: unknown command 'pretrain' (expected one of demo, pretrain-gpt, generate-gpt, serve-gpt, preprocess,"
                + " convert-hf, export-hf, plan, benchmark, launch; 'mcore4j --help' describes them)"), unknown.errLines());
    }

    @Test
    void relativePathsResolveAgainstTheWorkingDirectoryAlsoThroughASymlink() throws Exception {
        Files.writeString(work.resolve("corpus.jsonl"), "{\"text\": \"hello\"}\n{\"text\": \"world\"}\n");
        Path link = Files.createSymbolicLink(work.resolve("mc"), script);
        Result r = run(link, Map.of(), "preprocess", "--input", "corpus.jsonl", "--output-prefix", "corpus",
                "--tokenizer-type", "ByteLevel", "--append-eod", "--no-progress");
        assertEquals(0, r.code(), r.err());
        assertTrue(Files.size(work.resolve("corpus_text_document.bin")) > 0, r.out());
        assertTrue(Files.exists(work.resolve("corpus_text_document.idx")), r.out());

        Result missing = run(script, Map.of(), "preprocess", "--input", "absent.jsonl", "--output-prefix", "x",
                "--tokenizer-type", "ByteLevel", "--no-progress");
        assertEquals(2, missing.code(), missing.err()); // a bad --input is a bad flag value
        assertEquals(1, missing.errLines().size(), missing.err());
        assertTrue(missing.err().contains("absent.jsonl"), missing.err());
    }

    @Test
    void aJavaHomeWithoutJavaIsOneLineAndExitTwo() throws Exception {
        Result r = run(script, Map.of("JAVA_HOME", work.toString()), "--help");
        assertEquals(2, r.code());
        assertEquals(List.of("mcore4j: JAVA_HOME=" + work + " has no bin/java (expected a Java 17 or newer installation)"),
                r.errLines());
    }

    @Test
    void failuresOfPicocliCommandsAreOneLineWithoutAStackTrace() throws Exception {
        Result r = run(script, Map.of(), "export-hf", "--load", "no-such-checkpoint", "--save-hf", "out");
        assertTrue(r.code() == 1 || r.code() == 2, r.code() + ": " + r.err());
        assertEquals(1, r.errLines().size(), r.err());
        assertTrue(r.err().startsWith("export-hf") && r.err().contains("no-such-checkpoint"), r.err());
        assertFalse(r.err().contains("\tat "), r.err());

        Result flag = run(script, Map.of(), "generate-gpt", "--prompts", "x");
        assertEquals(2, flag.code(), flag.err());
        assertEquals(1, flag.errLines().size(), flag.err());
        assertTrue(flag.err().startsWith("generate-gpt: ") && flag.err().contains("--load"), flag.err());
    }

    @Test
    void launchedRanksRunWithTheJvmOptionsOfTheCommand() throws Exception {
        // -XX:+PrintCommandLineFlags makes every JVM that has it print its flags: ranks print with their prefix
        Result r = run(script, Map.of("MCORE4J_JAVA_OPTS", "-Xmx200m -XX:+PrintCommandLineFlags"),
                "launch", "--nproc", "2", Mcore4jCli.class.getName(), "--help");
        assertEquals(0, r.code(), r.err());
        for (String rank : List.of("[rank 0] ", "[rank 1] ")) {
            assertTrue(r.out().lines().anyMatch(l -> l.startsWith(rank) && l.contains("-XX:MaxHeapSize=209715200")
                    && l.contains("-XX:+PrintCommandLineFlags")), r.out());
            assertTrue(r.out().lines().anyMatch(l -> l.startsWith(rank + "Usage: mcore4j COMMAND")), r.out());
        }
    }

    private Result run(Path command, Map<String, String> env, String... args) throws IOException, InterruptedException {
        List<String> argv = new ArrayList<>(List.of(command.toString()));
        argv.addAll(List.of(args));
        ProcessBuilder pb = new ProcessBuilder(argv).directory(work.toFile());
        pb.environment().put("MCORE4J_JAVA_OPTS", "-Xmx256m -XX:TieredStopAtLevel=1");
        pb.environment().remove("JAVA_TOOL_OPTIONS");
        pb.environment().putAll(env);
        Path out = work.resolve(".out");
        Path err = work.resolve(".err");
        pb.redirectOutput(out.toFile()).redirectError(err.toFile());
        Process p = pb.start();
        if (!p.waitFor(60, TimeUnit.SECONDS)) {
            p.destroyForcibly();
            throw new AssertionError(String.join(" ", argv) + " did not finish within 60 s");
        }
        return new Result(p.exitValue(), Files.readString(out, StandardCharsets.UTF_8), Files.readString(err, StandardCharsets.UTF_8));
    }
}
