package io.mcore4j.samples.launch;

import java.io.IOException;
import java.io.BufferedReader;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.io.UncheckedIOException;
import java.net.ServerSocket;
import java.nio.file.Path;
import java.nio.charset.StandardCharsets;
import java.security.SecureRandom;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

/**
 * Starts {@code --nproc N} JVMs running {@code MAIN_CLASS ARGS...} on this machine, one per rank,
 * with this JVM's class path and the torchrun environment. Each rank's output is forwarded line by
 * line, prefixed with its rank when there are several. If a rank exits with a non-zero status the
 * others are stopped and the launcher exits with that status.
 *
 * <pre>java -cp CLASSPATH io.mcore4j.samples.launch.LocalLauncher --nproc 4 [--jvm-arg -Xmx2g]... \
 *     io.mcore4j.samples.pretrain.PretrainGpt --tensor-model-parallel-size 2 ...</pre>
 */
public final class LocalLauncher {
    private LocalLauncher() {}

    /**
     * @param argv {@code --nproc N [--jvm-arg ARG]... MAIN_CLASS [ARGS...]}
     */
    public static void main(String[] argv) {
        int nproc = -1;
        List<String> jvmArgs = new ArrayList<>();
        int i = 0;
        while (i < argv.length && argv[i].startsWith("--")) {
            if (argv[i].equals("--nproc") && i + 1 < argv.length) {
                nproc = Integer.parseInt(argv[i + 1]);
            } else if (argv[i].equals("--jvm-arg") && i + 1 < argv.length) {
                jvmArgs.add(argv[i + 1]);
            } else {
                usage("unknown option " + argv[i]);
            }
            i += 2;
        }
        if (nproc < 1 || i >= argv.length) {
            usage(nproc < 1 ? "--nproc N (N >= 1) is required" : "the main class to run is missing");
        }
        List<String> program = List.of(argv).subList(i, argv.length);
        System.exit(launch(nproc, jvmArgs, program, System.out));
    }

    private static void usage(String problem) {
        System.err.println("local launcher: " + problem);
        System.err.println("usage: LocalLauncher --nproc N [--jvm-arg ARG]... MAIN_CLASS [ARGS...]");
        System.exit(2);
    }

    /**
     * Runs the ranks and waits for them.
     *
     * @param nproc number of ranks
     * @param jvmArgs extra JVM options for every rank
     * @param program main class and its arguments
     * @param out where rank output is forwarded
     * @return 0 if every rank succeeded, else the first failing rank's exit status
     */
    public static int launch(int nproc, List<String> jvmArgs, List<String> program, PrintStream out) {
        String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
        String token = HexFormat.of().formatHex(new SecureRandom().generateSeed(16));
        int port = freePort();
        List<Process> ranks = new ArrayList<>();
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
                Map<String, String> env = pb.environment();
                env.put("RANK", String.valueOf(rank));
                env.put("LOCAL_RANK", String.valueOf(rank));
                env.put("WORLD_SIZE", String.valueOf(nproc));
                env.put("LOCAL_WORLD_SIZE", String.valueOf(nproc));
                env.put("MASTER_ADDR", "127.0.0.1");
                env.put("MASTER_PORT", String.valueOf(port));
                env.put("MCORE4J_JOB_TOKEN", token);
                Process p = pb.start();
                ranks.add(p);
                pumps.add(forward(p.getInputStream(), nproc > 1 ? "[rank " + rank + "] " : "", out));
            }
            int status = 0;
            boolean running = true;
            while (running) {
                running = false;
                for (Process p : ranks) {
                    if (p.isAlive()) {
                        running = true;
                    } else if (p.exitValue() != 0 && status == 0) {
                        status = p.exitValue();
                        ranks.forEach(Process::destroy);
                    }
                }
                if (running) {
                    ranks.get(0).waitFor(100, TimeUnit.MILLISECONDS);
                }
            }
            for (Thread t : pumps) {
                t.join();
            }
            return status;
        } catch (IOException e) {
            ranks.forEach(Process::destroyForcibly);
            throw new UncheckedIOException("could not start a rank", e);
        } catch (InterruptedException e) {
            ranks.forEach(Process::destroyForcibly);
            Thread.currentThread().interrupt();
            return 130;
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

    private static int freePort() {
        try (ServerSocket s = new ServerSocket(0)) {
            return s.getLocalPort();
        } catch (IOException e) {
            throw new UncheckedIOException("no free port for the rendezvous", e);
        }
    }
}
