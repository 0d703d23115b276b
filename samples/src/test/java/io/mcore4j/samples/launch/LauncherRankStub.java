package io.mcore4j.samples.launch;

import io.mcore4j.parallel.launch.LaunchEnvironment;
import io.mcore4j.parallel.rendezvous.JobToken;
import io.mcore4j.parallel.rendezvous.RendezvousStore;

import java.time.Duration;
import java.util.List;
import java.util.Map;

/**
 * A rank for {@link LauncherReliabilityTest}, without DJL so that it starts fast. Prints
 * {@code pid N} first, then acts by its first argument:
 * <ul>
 *   <li>{@code fail R S}: rank R exits with status S at once; the others ignore SIGTERM (a shutdown
 *       hook that never returns, like a hung or stopped rank) and wait forever;</li>
 *   <li>{@code sleep}: every rank waits forever (and dies on SIGTERM);</li>
 *   <li>{@code store}: every rank connects to the job's rendezvous store, meets the others there,
 *       and prints whether it hosts the store.</li>
 * </ul>
 */
public final class LauncherRankStub {
    private LauncherRankStub() {}

    /**
     * @param args the mode and its values
     * @throws InterruptedException never in practice
     */
    public static void main(String[] args) throws InterruptedException {
        int rank = Integer.parseInt(System.getenv("RANK"));
        System.out.println("pid " + ProcessHandle.current().pid());
        System.out.flush();
        switch (args[0]) {
            case "fail" -> {
                if (rank == Integer.parseInt(args[1])) {
                    Thread.sleep(300);
                    System.exit(Integer.parseInt(args[2]));
                }
                Runtime.getRuntime().addShutdownHook(new Thread(() -> {
                    while (true) {
                        try {
                            Thread.sleep(60_000);
                        } catch (InterruptedException e) {
                            // keep ignoring the termination
                        }
                    }
                }));
                Thread.sleep(Long.MAX_VALUE);
            }
            case "sleep" -> Thread.sleep(Long.MAX_VALUE);
            case "store" -> {
                Map<String, String> vars = System.getenv();
                LaunchEnvironment env = LaunchEnvironment.fromSystem();
                try (RendezvousStore store = RendezvousStore.connect(env, RendezvousStore.port(env, vars),
                        JobToken.fromEnvironment(vars, env), Duration.ofSeconds(20))) {
                    if (store.client().add("arrived", 1) == env.worldSize()) {
                        store.client().set("everyone", new byte[] {1});
                    }
                    store.client().waitFor(List.of("everyone"));
                    System.out.println("hosts store " + store.hostsServer());
                }
            }
            default -> throw new IllegalArgumentException("unknown mode " + args[0]);
        }
    }
}
