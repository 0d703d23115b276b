package io.mcore4j.samples.launch;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTimeoutPreemptively;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import org.junit.jupiter.api.Test;

/**
 * Reliability (issue 22, items 2, 4 and 9): the launcher's bad options, a failing rank among hung
 * ones, the launcher's own termination, and the store port it holds for the whole job.
 */
class LauncherReliabilityTest {
    private static final Pattern PID = Pattern.compile("pid (\\d+)");
    private static final List<String> JVM = List.of("-Xmx64m", "-XX:TieredStopAtLevel=1", "-Xshare:auto");

    private static final class Captured {
        final ByteArrayOutputStream out = new ByteArrayOutputStream();
        final ByteArrayOutputStream err = new ByteArrayOutputStream();
        final PrintStream outStream = new PrintStream(out, true, StandardCharsets.UTF_8);
        final PrintStream errStream = new PrintStream(err, true, StandardCharsets.UTF_8);

        String out() {
            return out.toString(StandardCharsets.UTF_8);
        }

        String err() {
            return err.toString(StandardCharsets.UTF_8);
        }
    }

    @Test
    void badOptionsPrintOneLineAndTheUsageAndExitWithTwo() {
        for (String[] argv : List.of(new String[] {"--nproc", "abc", "Main"}, new String[] {"--nproc", "0", "Main"},
                new String[] {"--nproc", "2"}, new String[] {"--nproc", "2", "--grace-period-seconds", "-1", "Main"})) {
            Captured c = new Captured();
            assertEquals(2, LocalLauncher.run(argv, c.outStream, c.errStream), String.join(" ", argv));
            String[] lines = c.err().split("\n");
            assertTrue(lines[0].startsWith("LocalLauncher: "), c.err());
            assertTrue(c.err().contains("Usage: LocalLauncher"), c.err());
            assertFalse(c.err().contains("Exception") || c.err().contains("\tat "), c.err());
        }
        Captured abc = new Captured();
        LocalLauncher.run(new String[] {"--nproc", "abc", "Main"}, abc.outStream, abc.errStream);
        assertTrue(abc.err().split("\n")[0].contains("--nproc") && abc.err().split("\n")[0].contains("abc"), abc.err());
        Captured zero = new Captured();
        LocalLauncher.run(new String[] {"--nproc", "0", "Main"}, zero.outStream, zero.errStream);
        assertTrue(zero.err().split("\n")[0].contains("--nproc must be at least 1, got 0"), zero.err());
        Captured help = new Captured();
        assertEquals(0, LocalLauncher.run(new String[] {"--help"}, help.outStream, help.errStream));
        assertTrue(help.out().contains("--nproc=N") && help.out().contains("MAIN_CLASS"), help.out());
    }

    @Test
    void aFailingRankIsNamedAndHungRanksAreKilledAfterTheGracePeriod() {
        Captured c = new Captured();
        int status = assertTimeoutPreemptively(Duration.ofSeconds(90), () -> LocalLauncher.launch(3, JVM,
                List.of(LauncherRankStub.class.getName(), "fail", "1", "3"), c.outStream, c.errStream, Duration.ofMillis(500)));
        assertEquals(3, status, c.err() + c.out());
        assertTrue(c.err().contains("rank 1 exited with status 3; stopping the other 2 rank(s)"), c.err());
        assertTrue(c.err().contains("rank 0 did not stop within 500 ms of SIGTERM; sending SIGKILL"), c.err());
        assertTrue(c.err().contains("rank 2 did not stop within 500 ms of SIGTERM; sending SIGKILL"), c.err());
        for (long pid : pids(c.out())) {
            assertFalse(ProcessHandle.of(pid).map(ProcessHandle::isAlive).orElse(false), "rank pid " + pid + " survived");
        }
    }

    @Test
    void terminatingTheLauncherStopsItsRanks() throws Exception {
        String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
        List<String> command = new ArrayList<>(List.of(java, "-Xmx64m", "-cp", System.getProperty("java.class.path"),
                LocalLauncher.class.getName(), "--nproc", "2", "--grace-period-seconds", "2"));
        for (String a : JVM) {
            command.add("--jvm-arg=" + a);
        }
        command.addAll(List.of(LauncherRankStub.class.getName(), "sleep"));
        Process launcher = new ProcessBuilder(command).redirectErrorStream(true).start();
        List<Long> pids = new ArrayList<>();
        try {
            BufferedReader reader = new BufferedReader(new InputStreamReader(launcher.getInputStream(), StandardCharsets.UTF_8));
            assertTimeoutPreemptively(Duration.ofSeconds(60), () -> {
                for (String line; pids.size() < 2 && (line = reader.readLine()) != null; ) {
                    pids.addAll(pids(line));
                }
            });
            assertEquals(2, pids.size());
            launcher.destroy(); // SIGTERM to the launcher only
            assertTrue(launcher.waitFor(30, TimeUnit.SECONDS), "the launcher did not exit");
            for (long pid : pids) {
                Optional<ProcessHandle> rank = ProcessHandle.of(pid);
                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
                while (rank.map(ProcessHandle::isAlive).orElse(false) && System.nanoTime() < deadline) {
                    Thread.sleep(50);
                }
                assertFalse(rank.map(ProcessHandle::isAlive).orElse(false), "rank pid " + pid + " outlived its launcher");
            }
        } finally {
            launcher.destroyForcibly();
            for (long pid : pids) {
                ProcessHandle.of(pid).ifPresent(ProcessHandle::destroyForcibly);
            }
        }
    }

    @Test
    void theLauncherHoldsTheStorePortForTheWholeJob() {
        Captured c = new Captured();
        int status = assertTimeoutPreemptively(Duration.ofSeconds(90), () -> LocalLauncher.launch(2, JVM,
                List.of(LauncherRankStub.class.getName(), "store"), c.outStream, c.errStream, Duration.ofSeconds(1)));
        assertEquals(0, status, c.err() + c.out());
        // rank 0 did not have to bind a port the launcher had released: the launcher served the store
        assertTrue(c.out().contains("[rank 0] hosts store false") && c.out().contains("[rank 1] hosts store false"), c.out());
    }

    private static List<Long> pids(String text) {
        List<Long> out = new ArrayList<>();
        Matcher m = PID.matcher(text);
        while (m.find()) {
            out.add(Long.parseLong(m.group(1)));
        }
        return out;
    }
}
