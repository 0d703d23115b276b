package io.mcore4j.samples.cli;

import io.mcore4j.samples.bench.GptBenchmark;
import io.mcore4j.samples.generate.GenerateGpt;
import io.mcore4j.samples.generate.ServeGpt;
import io.mcore4j.samples.hf.ConvertHf;
import io.mcore4j.samples.hf.ExportHf;
import io.mcore4j.samples.launch.LocalLauncher;
import io.mcore4j.samples.preprocess.PreprocessData;
import io.mcore4j.samples.pretrain.PlanLayouts;
import io.mcore4j.samples.pretrain.PretrainArgs;
import io.mcore4j.samples.pretrain.PretrainGpt;
import picocli.CommandLine;

import java.io.PrintStream;
import java.io.PrintWriter;
import java.lang.management.ManagementFactory;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.function.Supplier;

/**
 * {@code mcore4j COMMAND [FLAGS]}: the distribution's command line ({@code bin/mcore4j}), one JVM
 * per command. Each command is an existing sample program run through its {@code execute} method,
 * so its flags, output, one-line errors and exit codes are the program's own: 0 done, 2 a bad flag
 * or value, 1 a failed run. Relative paths in flags resolve against the directory the user runs the
 * command from.
 *
 * <p>{@code mcore4j --help} lists the commands; {@code mcore4j COMMAND --help} lists a command's
 * flags. An unknown command, or none, is one line on standard error and exit code 2.
 */
public final class Mcore4jCli {
    /**
     * The README's main job, the flags {@code mcore4j demo} puts before the user's (the user's win):
     * a small GPT at TP2 x PP2 on 4 in-JVM CPU ranks, trained on a byte-level corpus of the text files
     * under the working directory, checkpointed in {@code runs/gpt-demo}, which a second run resumes.
     */
    public static final List<String> MAIN_JOB_FLAGS = List.of("--nproc", "4", "--tensor-model-parallel-size", "2",
            "--pipeline-model-parallel-size", "2", "--num-layers", "4", "--hidden-size", "128", "--num-attention-heads", "4",
            "--seq-length", "128", "--micro-batch-size", "4", "--global-batch-size", "16", "--lr", "3e-3", "--min-lr", "3e-4",
            "--lr-warmup-iters", "10", "--lr-decay-style", "cosine", "--lr-decay-iters", "120", "--train-iters", "120",
            "--corpus-from-sources", ".", "--vocab-size", "257", "--load", "runs/gpt-demo", "--save", "runs/gpt-demo",
            "--save-interval", "60", "--eval-interval", "40", "--eval-iters", "2", "--log-interval", "10");

    private static final Map<String, Subcommand> COMMANDS = commands();

    private Mcore4jCli() {}

    /** @param argv {@code COMMAND [FLAGS]}; {@code --help} lists the commands */
    public static void main(String[] argv) {
        System.exit(execute(argv, System.out, System.err));
    }

    /**
     * Runs one command without exiting the JVM.
     *
     * @param argv the command's name, then its flags
     * @param out standard output
     * @param err standard error
     * @return the command's exit code; 0 for {@code --help}, 2 for an unknown command or none
     */
    public static int execute(String[] argv, PrintStream out, PrintStream err) {
        if (argv.length == 0) {
            err.println("mcore4j: no command given (expected one of " + String.join(", ", COMMANDS.keySet())
                    + "; 'mcore4j --help' describes them)");
            return 2;
        }
        String name = argv[0];
        if (name.equals("--help") || name.equals("-h") || name.equals("help")) {
            usage(out);
            return 0;
        }
        Subcommand command = COMMANDS.get(name);
        if (command == null) {
            err.println("mcore4j: unknown command '" + name + "' (expected one of " + String.join(", ", COMMANDS.keySet())
                    + "; 'mcore4j --help' describes them)");
            return 2;
        }
        return command.entry().run(Arrays.copyOfRange(argv, 1, argv.length), out, err);
    }

    /** @return the commands in the order {@code --help} lists them, by name */
    public static Map<String, Subcommand> commands() {
        Map<String, Subcommand> all = new LinkedHashMap<>();
        for (Subcommand c : List.of(
                new Subcommand("demo", "the README's main job: pretrain-gpt at TP2 x PP2 on 4 CPU ranks, then a completion"
                        + " (pretrain-gpt flags override its own)",
                        (argv, out, err) -> PretrainGpt.execute("demo", new PretrainArgs(), null, MAIN_JOB_FLAGS, argv, out, err,
                                PretrainGpt::trainThenComplete)),
                new Subcommand("pretrain-gpt", "train a GPT with Megatron-LM's flags",
                        (argv, out, err) -> PretrainGpt.execute("pretrain-gpt", new PretrainArgs(), null, List.of(), argv, out,
                                err, PretrainGpt::trainThenComplete)),
                new Subcommand("generate-gpt", "complete prompts from a pretrain-gpt checkpoint",
                        picocli("generate-gpt", GenerateGpt::new)),
                new Subcommand("serve-gpt", "serve a checkpoint over OpenAI's HTTP API (completions, chat, streaming)",
                        picocli("serve-gpt", ServeGpt::new)),
                new Subcommand("preprocess", "turn JSON Lines into Megatron .bin/.idx datasets", PreprocessData::execute),
                new Subcommand("convert-hf", "import a Hugging Face checkpoint as an mcore4j checkpoint at a layout",
                        picocli("convert-hf", ConvertHf::new)),
                new Subcommand("export-hf", "write an mcore4j checkpoint as a Hugging Face directory",
                        picocli("export-hf", ExportHf::new)),
                new Subcommand("plan", "rank the parallel layouts of a job on a cluster by estimated step time",
                        PlanLayouts::execute),
                new Subcommand("benchmark", "time pretrain-gpt's training step on a model preset (GptBenchmark)",
                        GptBenchmark::execute),
                new Subcommand("launch", "run a main class in one JVM per rank on this machine (LocalLauncher)",
                        (argv, out, err) -> LocalLauncher.run(withThisJvmsOptions(argv), out, err)))) {
            all.put(c.name(), c);
        }
        return Collections.unmodifiableMap(all);
    }

    private static void usage(PrintStream out) {
        out.println("Usage: mcore4j COMMAND [FLAGS]; 'mcore4j COMMAND --help' lists a command's flags.");
        out.println("Relative paths resolve against the working directory. Exit codes: 0 done, 2 a bad flag or value,"
                + " 1 a failed run.");
        out.println("JVM options come from MCORE4J_JAVA_OPTS (e.g. -Xmx8g), java from JAVA_HOME or the PATH.");
        out.println("Commands:");
        int width = COMMANDS.keySet().stream().mapToInt(String::length).max().orElse(0);
        COMMANDS.values().forEach(c -> out.printf("  %-" + width + "s  %s%n", c.name(), c.summary()));
    }

    /**
     * A picocli program run with one-line errors: a bad flag or value, or an IllegalArgumentException
     * from the run, is {@code NAME: message} and exit code 2; any other failure is {@code NAME failed:
     * exception} and exit code 1, without a stack trace.
     */
    static Subcommand.Entry picocli(String name, Supplier<Object> program) {
        return (argv, out, err) -> {
            CommandLine cmd = new CommandLine(program.get());
            cmd.getCommandSpec().name(name);
            cmd.setOut(new PrintWriter(out, true));
            cmd.setErr(new PrintWriter(err, true));
            cmd.setParameterExceptionHandler((e, args) -> {
                err.println(name + ": " + oneLine(e.getMessage()) + " ('" + name + " --help' lists the flags)");
                return 2;
            });
            cmd.setExecutionExceptionHandler((e, command, parsed) -> {
                for (Throwable t = e; t != null; t = t.getCause()) {
                    if (t instanceof IllegalArgumentException bad) {
                        err.println(name + ": " + oneLine(bad.getMessage()));
                        return 2;
                    }
                }
                err.println(name + " failed: " + oneLine(e.getMessage() != null ? e.getMessage() : e.toString()));
                return 1;
            });
            return cmd.execute(argv);
        };
    }

    /**
     * The launcher's flags with this JVM's options ({@code MCORE4J_JAVA_OPTS} and the script's own) put
     * first as {@code --jvm-arg}s, so that every rank runs with them; the user's {@code --jvm-arg}s follow
     * and win.
     */
    static String[] withThisJvmsOptions(String[] argv) {
        List<String> all = new ArrayList<>();
        for (String option : ManagementFactory.getRuntimeMXBean().getInputArguments()) {
            all.add("--jvm-arg=" + option);
        }
        all.addAll(List.of(argv));
        return all.toArray(String[]::new);
    }

    private static String oneLine(String message) {
        return String.valueOf(message).strip().replaceAll("\\s*\\R\\s*", " ");
    }
}
