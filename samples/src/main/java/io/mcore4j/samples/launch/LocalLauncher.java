package io.mcore4j.samples.launch;

import io.mcore4j.parallel.rendezvous.JobToken;
import io.mcore4j.parallel.rendezvous.RendezvousStore;
import io.mcore4j.parallel.rendezvous.TcpStoreServer;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.io.PrintWriter;
import java.io.UncheckedIOException;
import java.net.InetAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.security.SecureRandom;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.Callable;
import java.util.concurrent.TimeUnit;

import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;
import picocli.CommandLine.Spec;

/**
 * Starts {@code --nproc N} JVMs running {@code MAIN_CLASS ARGS...} on this machine, one per rank,
 * with this JVM's class path and the torchrun environment. Each rank's output is forwarded line by
 * line, prefixed with its rank when there are several.
 *
 * <p>The launcher itself serves the job's rendezvous store on a loopback port it binds before any
 * rank starts (so no other process can take the port in between), with a fresh random job token
 * ({@code MCORE4J_JOB_TOKEN}); ranks find it through {@code MASTER_ADDR}, {@code MASTER_PORT} and
 * {@value RendezvousStore#EXTERNAL_STORE_VAR}{@code =1}.
 *
 * <p>If a rank exits with a non-zero status the launcher names it on standard error, stops the
 * others (SIGTERM, then SIGKILL for any still alive after the grace period, e.g. a stopped or hung
 * rank) and exits with that status. Terminating the launcher (SIGTERM, Ctrl-C) stops its ranks the
 * same way, so none is left running. Bad options print one line naming the option and the value,
 * then the usage, and exit with status 2.
 *
 * <pre>java -cp CLASSPATH io.mcore4j.samples.launch.LocalLauncher --nproc 4 [--jvm-arg -Xmx2g]... \
 *     io.mcore4j.samples.pretrain.PretrainGpt --tensor-model-parallel-size 2 ...</pre>
 */
@Command(name = "LocalLauncher", mixinStandardHelpOptions = true, sortOptions = false,
        description = "Runs MAIN_CLASS in N JVMs on this machine, one per rank, with the torchrun environment.",
        footer = "Exit status: 0 when every rank succeeded; the first failing rank's status otherwise; 2 for bad options.")
public final class LocalLauncher implements Callable<Integer> {
    /** Default time ranks get between SIGTERM and SIGKILL. */
    public static final Duration DEFAULT_GRACE_PERIOD = Duration.ofSeconds(10);

    private static final long POLL_MS = 100;

    @Spec
    private CommandSpec spec;

    @Option(names = "--nproc", required = true, paramLabel = "N", description = "number of ranks (processes), at least 1")
    private int nproc;

    @Option(names = "--jvm-arg", paramLabel = "ARG", description = "an extra JVM option for every rank (repeatable)")
    private List<String> jvmArgs = new ArrayList<>();

    @Option(names = "--grace-period-seconds", paramLabel = "S", defaultValue = "10",
            description = "seconds between SIGTERM and SIGKILL when stopping ranks (default: ${DEFAULT-VALUE})")
    private double graceSeconds;

    @Parameters(index = "0", paramLabel = "MAIN_CLASS", description = "the main class every rank runs")
    private String mainClass;

    @Parameters(index = "1..*", paramLabel = "ARGS", description = "its arguments")
    private List<String> args = new ArrayList<>();

    private PrintStream out = System.out;
    private PrintStream err = System.err;

    /**
     * Parses the options, runs the ranks and exits with {@link #run}'s status.
     *
     * @param argv {@code [--jvm-arg ARG]... --nproc N MAIN_CLASS [ARGS...]}
     */
    public static void main(String[] argv) {
        System.exit(run(argv, System.out, System.err));
    }

    /**
     * Parses the options and runs the ranks (or prints help).
     *
     * @param argv the command line
     * @param out where rank output and help go
     * @param err where the launcher's own messages go
     * @return 0 if every rank succeeded, the first failing rank's status, or 2 for bad options
     */
    public static int run(String[] argv, PrintStream out, PrintStream err) {
        LocalLauncher launcher = new LocalLauncher();
        launcher.out = out;
        launcher.err = err;
        CommandLine cli = new CommandLine(launcher);
        cli.setStopAtPositional(true);
        cli.setOut(new PrintWriter(out, true));
        cli.setErr(new PrintWriter(err, true));
        cli.setParameterExceptionHandler((e, arguments) -> {
            CommandLine c = e.getCommandLine();
            c.getErr().println("LocalLauncher: " + e.getMessage());
            c.usage(c.getErr());
            return CommandLine.ExitCode.USAGE;
        });
        return cli.execute(argv);
    }

    @Override
    public Integer call() {
        if (nproc < 1) {
            throw new CommandLine.ParameterException(spec.commandLine(), "--nproc must be at least 1, got " + nproc);
        }
        if (!(graceSeconds >= 0) || Double.isInfinite(graceSeconds)) {
            throw new CommandLine.ParameterException(spec.commandLine(),
                    "--grace-period-seconds must be a finite number >= 0, got " + graceSeconds);
        }
        List<String> program = new ArrayList<>();
        program.add(mainClass);
        program.addAll(args);
        return launch(nproc, jvmArgs, program, out, err, Duration.ofMillis(Math.round(graceSeconds * 1000)));
    }

    /**
     * {@link #launch(int, List, List, PrintStream, PrintStream, Duration)} with launcher messages on
     * standard error and the {@link #DEFAULT_GRACE_PERIOD default grace period}.
     *
     * @param nproc number of ranks
     * @param jvmArgs extra JVM options for every rank
     * @param program main class and its arguments
     * @param out where rank output is forwarded
     * @return 0 if every rank succeeded, else the first failing rank's exit status
     */
    public static int launch(int nproc, List<String> jvmArgs, List<String> program, PrintStream out) {
        return launch(nproc, jvmArgs, program, out, System.err, DEFAULT_GRACE_PERIOD);
    }

    /**
     * Runs the ranks and waits for them. While it runs, a JVM shutdown hook stops the ranks if this
     * JVM is terminated.
     *
     * @param nproc number of ranks, at least 1
     * @param jvmArgs extra JVM options for every rank
     * @param program main class and its arguments
     * @param out where rank output is forwarded
     * @param err where the launcher names a failing rank and ranks it had to kill
     * @param grace how long stopped ranks get between SIGTERM and SIGKILL
     * @return 0 if every rank succeeded, else the first failing rank's exit status (128 + signal
     *         for a rank killed by a signal)
     * @throws UncheckedIOException if a rank cannot be started or the store port cannot be bound
     */
    public static int launch(int nproc, List<String> jvmArgs, List<String> program, PrintStream out, PrintStream err,
                             Duration grace) {
        if (nproc < 1) {
            throw new IllegalArgumentException("nproc must be at least 1, got " + nproc);
        }
        Objects.requireNonNull(grace, "grace");
        String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
        String secret = HexFormat.of().formatHex(new SecureRandom().generateSeed(16));
        List<Process> ranks = new ArrayList<>();
        Thread stopOnExit = new Thread(() -> stop(ranks, -1, grace, err), "local-launcher-stop-ranks");
        try (TcpStoreServer store = startStore(secret)) {
            Runtime.getRuntime().addShutdownHook(stopOnExit);
            List<Thread> pumps = new ArrayList<>();
            try {
                for (int rank = 0; rank < nproc; rank++) {
                    List<String> command = new ArrayList<>();
                    command.add(java);
                    command.addAll(jvmArgs);
                    command.add("-cp");
                    command.add(System.getProperty("java.class.path"));
                    command.addAll(program);
                    ProcessBuilder pb = new ProcessBuilder(command).redirectErrorStream(true);
                    environment(pb.environment(), rank, nproc, store.port(), secret);
                    Process p;
                    synchronized (ranks) {
                        p = pb.start();
                        ranks.add(p);
                    }
                    pumps.add(forward(p.getInputStream(), nproc > 1 ? "[rank " + rank + "] " : "", out));
                }
                int status = await(ranks, grace, err);
                for (Thread t : pumps) {
                    t.join(TimeUnit.SECONDS.toMillis(5));
                }
                return status;
            } catch (IOException e) {
                stop(ranks, -1, Duration.ZERO, err);
                throw new UncheckedIOException("could not start rank " + ranks.size(), e);
            } catch (InterruptedException e) {
                stop(ranks, -1, grace, err);
                Thread.currentThread().interrupt();
                return 130;
            } finally {
                try {
                    Runtime.getRuntime().removeShutdownHook(stopOnExit);
                } catch (IllegalStateException shuttingDown) {
                    // the hook is running or has run: it stops the ranks
                }
            }
        }
    }

    /** The torchrun variables of one rank, plus the job token and where the launcher's store listens. */
    private static void environment(Map<String, String> env, int rank, int nproc, int storePort, String secret) {
        env.put("RANK", String.valueOf(rank));
        env.put("LOCAL_RANK", String.valueOf(rank));
        env.put("WORLD_SIZE", String.valueOf(nproc));
        env.put("LOCAL_WORLD_SIZE", String.valueOf(nproc));
        env.put("MASTER_ADDR", InetAddress.getLoopbackAddress().getHostAddress());
        env.put("MASTER_PORT", String.valueOf(storePort));
        env.put(RendezvousStore.PORT_VAR, String.valueOf(storePort));
        env.put(RendezvousStore.EXTERNAL_STORE_VAR, "1");
        env.put(JobToken.ENV_VAR, secret);
        env.remove(RendezvousStore.AGENT_STORE_VAR);
    }

    private static TcpStoreServer startStore(String secret) {
        try {
            return TcpStoreServer.start(InetAddress.getLoopbackAddress(), 0, JobToken.of(secret));
        } catch (RuntimeException e) {
            throw new UncheckedIOException(new IOException("no loopback port for the rendezvous store: " + e.getMessage(), e));
        }
    }

    /** Waits for every rank; on the first failure names it and stops the others. */
    private static int await(List<Process> ranks, Duration grace, PrintStream err) throws InterruptedException {
        while (true) {
            boolean running = false;
            for (int r = 0; r < ranks.size(); r++) {
                Process p = ranks.get(r);
                if (p.isAlive()) {
                    running = true;
                } else if (p.exitValue() != 0) {
                    int status = p.exitValue();
                    long others = ranks.stream().filter(Process::isAlive).count();
                    err.println("LocalLauncher: rank " + r + " exited with status " + status + describe(status)
                            + (others > 0 ? "; stopping the other " + others + " rank(s)" : ""));
                    stop(ranks, r, grace, err);
                    return status;
                }
            }
            if (!running) {
                return 0;
            }
            ranks.get(0).waitFor(POLL_MS, TimeUnit.MILLISECONDS);
        }
    }

    private static String describe(int status) {
        return status > 128 && status < 160 ? " (killed by signal " + (status - 128) + ")" : "";
    }

    /**
     * SIGTERM to every live rank, SIGKILL to those still alive after {@code grace}, then waits for
     * them to be gone. Safe to call from several threads (the shutdown hook and the launcher).
     */
    private static void stop(List<Process> ranks, int failed, Duration grace, PrintStream err) {
        List<Process> live;
        synchronized (ranks) {
            live = new ArrayList<>(ranks);
        }
        for (Process p : live) {
            if (p.isAlive()) {
                p.destroy();
            }
        }
        long deadline = System.nanoTime() + grace.toNanos();
        for (int r = 0; r < live.size(); r++) {
            Process p = live.get(r);
            try {
                if (!p.waitFor(Math.max(0, deadline - System.nanoTime()), TimeUnit.NANOSECONDS)) {
                    if (r != failed) {
                        err.println("LocalLauncher: rank " + r + " did not stop within " + grace.toMillis()
                                + " ms of SIGTERM; sending SIGKILL");
                    }
                    p.descendants().forEach(ProcessHandle::destroyForcibly);
                    p.destroyForcibly();
                    p.waitFor(5, TimeUnit.SECONDS);
                }
            } catch (InterruptedException e) {
                p.destroyForcibly();
                Thread.currentThread().interrupt();
            }
        }
    }

    private static Thread forward(InputStream in, String prefix, PrintStream out) {
        Thread t = new Thread(() -> {
            try (BufferedReader reader = new BufferedReader(new InputStreamReader(in, StandardCharsets.UTF_8))) {
                for (String line; (line = reader.readLine()) != null; ) {
                    synchronized (out) {
                        out.println(prefix + line);
                    }
                }
            } catch (IOException e) {
                // the rank's stream closed
            }
        }, "forward " + prefix);
        t.setDaemon(true);
        t.start();
        return t;
    }
}
