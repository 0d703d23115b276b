package io.mcore4j.parallel.tcp;

import io.mcore4j.parallel.rendezvous.JobToken;
import io.mcore4j.parallel.rendezvous.RendezvousStore;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroup;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.io.IOException;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.stream.IntStream;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The TCP backend across real processes: spawns {@link TcpWorkerMain} JVMs with the torchrun
 * variables over loopback, checks every collective of every dtype against the serial computation
 * (in the children) and against the in-JVM backend bit for bit (here), and checks that a process
 * that dies makes the others fail at once naming it.
 */
class TcpMultiProcessTest {
    private static final long CHILD_LIMIT_SECONDS = 150;

    @TempDir
    Path logs;

    private final List<Process> started = new ArrayList<>();

    @AfterEach
    void killLeftovers() {
        // a failed assertion must not leave children running
        for (Process p : started) {
            if (p.isAlive()) {
                p.destroyForcibly();
            }
        }
    }

    @Test
    void twoProcessesMatchTheInJvmBackend() throws Exception {
        collectivesMatchInJvm(2);
    }

    @Test
    void fourProcessesMatchTheInJvmBackend() throws Exception {
        collectivesMatchInJvm(4);
    }

    private void collectivesMatchInJvm(int world) throws Exception {
        // no MCORE4J_JOB_TOKEN: the children derive the same token from the job's variables
        List<Child> children = launch(world, null, "collectives", "60000");
        List<List<String>> tcp = new ArrayList<>();
        for (Child c : children) {
            c.await();
            assertEquals(0, c.exitCode(), () -> "rank " + c.rank + " failed:\n" + c.output());
            tcp.add(c.lines("RESULT "));
        }
        ParallelDims dims = ParallelDims.of(world, 2, world / 2);
        List<List<String>> inJvm = InJvmWorld.run(world, Duration.ofSeconds(60), ctx -> {
            List<String> lines = new ArrayList<>(CollectiveScript.run(ctx.backend().communicator(
                    ProcessGroup.of("world", IntStream.range(0, world).toArray(), ctx.rank())), ctx.manager()));
            lines.add(CollectiveScript.groupSums(ctx.groups(dims), ctx.rank(), ctx.manager()));
            return lines;
        });
        for (int r = 0; r < world; r++) {
            assertTrue(tcp.get(r).size() > 60, "rank " + r + " printed " + tcp.get(r).size() + " results");
            assertEquals(inJvm.get(r), tcp.get(r), "rank " + r + ": TCP processes vs in-JVM threads");
        }
    }

    @Test
    void aKilledProcessMakesTheOthersFailNamingItBeforeTheTimeout() throws Exception {
        long timeoutMillis = 5000;
        List<Child> children = launch(3, "kill-test-token-" + System.nanoTime(), "kill", Long.toString(timeoutMillis), "2");
        for (Child c : children) {
            c.await();
        }
        Child victim = children.get(2);
        assertEquals(17, victim.exitCode(), victim::output);
        for (int r = 0; r < 2; r++) {
            Child c = children.get(r);
            assertEquals(3, c.exitCode(), c::output);
            List<String> failure = c.lines("COMM-FAILURE ");
            assertEquals(1, failure.size(), c::output);
            String line = failure.get(0);
            assertTrue(line.startsWith("ranks=[2] group=world[0,1,2] "), line);
            assertTrue(line.contains("all-reduce SUM float32 (16)") && line.contains("rank 2"), line);
            // the process died: no goodbye came, its socket just closed (or reset)
            assertTrue(line.contains("without a goodbye") || line.contains("failed"), line);
            System.out.println("rank " + r + ": " + line);
            long millis = Long.parseLong(line.replaceAll(".* millis=(\\d+) .*", "$1"));
            // a dead peer's socket closes: the call fails well before the 5 s timeout
            assertTrue(millis < timeoutMillis - 1000, "the all-reduce failed after " + millis + " ms");
        }
    }

    @Test
    void underTorchrunsAgentStoreTheStoreTakesTheNextPort() throws Exception {
        // torchrun's agent serves its own store at MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE=True):
        // stand in for it with a socket that accepts and never answers
        try (ServerSocket agentStore = agentStoreWithFreeNextPort()) {
            int port = agentStore.getLocalPort();
            List<Child> children = launch(2, null, port, Map.of(RendezvousStore.AGENT_STORE_VAR, "True"), "connect", "20000");
            for (Child c : children) {
                c.await();
                assertEquals(0, c.exitCode(), c::output);
                assertEquals(List.of("127.0.0.1:" + (port + 1)), c.lines("STORE "), c::output);
            }
        }
    }

    /**
     * A listening socket on a loopback port whose next port was free a moment ago (an ephemeral port
     * can sit right after a random one: the store's port must not be taken before the test starts).
     */
    private static ServerSocket agentStoreWithFreeNextPort() throws IOException {
        for (int attempt = 0; ; attempt++) {
            ServerSocket socket = new ServerSocket(0, 8, InetAddress.getLoopbackAddress());
            int next = socket.getLocalPort() + 1;
            try (ServerSocket probe = new ServerSocket(next, 1, InetAddress.getLoopbackAddress())) {
                return socket;
            } catch (IOException taken) {
                socket.close();
                if (attempt == 20) {
                    throw new IOException("no loopback port with a free next port in 20 tries", taken);
                }
            }
        }
    }

    private List<Child> launch(int world, String token, String... args) throws IOException {
        return launch(world, token, TcpThreads.freePort(), Map.of(), args);
    }

    private List<Child> launch(int world, String token, int port, Map<String, String> extraEnv, String... args) throws IOException {
        String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
        List<Child> children = new ArrayList<>();
        for (int r = 0; r < world; r++) {
            List<String> cmd = new ArrayList<>(List.of(java, "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                    "-Dai.djl.offline=true", "-Dai.djl.pytorch.num_threads=1", "-Dai.djl.pytorch.num_interop_threads=1",
                    "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                    "-cp", System.getProperty("java.class.path"), TcpWorkerMain.class.getName()));
            cmd.addAll(List.of(args));
            ProcessBuilder pb = new ProcessBuilder(cmd);
            Map<String, String> env = pb.environment();
            env.keySet().removeIf(k -> k.startsWith("SLURM_") || k.startsWith("OMPI_") || k.startsWith("PMIX_")
                    || k.startsWith("TORCHELASTIC_") || k.startsWith("LOCAL_") || k.equals(JobToken.ENV_VAR)
                    || k.equals("MCORE4J_JOB_ID") || k.equals(RendezvousStore.PORT_VAR));
            env.put("RANK", Integer.toString(r));
            env.put("WORLD_SIZE", Integer.toString(world));
            env.put("MASTER_ADDR", "127.0.0.1");
            env.put("MASTER_PORT", Integer.toString(port));
            if (token != null) {
                env.put(JobToken.ENV_VAR, token);
            }
            env.putAll(extraEnv);
            Path log = logs.resolve(args[0] + "-rank" + r + ".log");
            pb.redirectErrorStream(true).redirectOutput(log.toFile());
            Process p = pb.start();
            started.add(p);
            children.add(new Child(r, p, log));
        }
        return children;
    }

    private static final class Child {
        final int rank;
        final Process process;
        final Path log;

        Child(int rank, Process process, Path log) {
            this.rank = rank;
            this.process = process;
            this.log = log;
        }

        void await() throws InterruptedException {
            if (!process.waitFor(CHILD_LIMIT_SECONDS, TimeUnit.SECONDS)) {
                process.destroyForcibly();
                process.waitFor(10, TimeUnit.SECONDS);
                fail("rank " + rank + " did not finish within " + CHILD_LIMIT_SECONDS + " s:\n" + output());
            }
        }

        int exitCode() {
            return process.exitValue();
        }

        String output() {
            try {
                return Files.readString(log, StandardCharsets.UTF_8);
            } catch (IOException e) {
                return "(no output: " + e + ")";
            }
        }

        List<String> lines(String prefix) {
            List<String> out = new ArrayList<>();
            for (String l : output().split("\n")) {
                if (l.startsWith(prefix)) {
                    out.add(l.substring(prefix.length()));
                }
            }
            return out;
        }
    }
}
