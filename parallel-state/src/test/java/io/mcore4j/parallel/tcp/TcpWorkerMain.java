package io.mcore4j.parallel.tcp;

import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.Mcore4j;
import io.mcore4j.parallel.CommunicationException;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroup;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.ReduceOp;
import io.mcore4j.parallel.launch.LaunchEnvironment;

import java.time.Duration;
import java.util.stream.IntStream;

/**
 * One rank of a multi-process test, started by {@link TcpMultiProcessTest} with the torchrun
 * variables set. Modes:
 * <ul>
 *   <li>{@code collectives}: runs {@link CollectiveScript} over the world and the layout's groups,
 *       printing {@code RESULT <line>} for each result; exit 0 if every check passed, 1 otherwise.</li>
 *   <li>{@code kill <rank>}: that rank halts right after connecting (exit 17, no goodbye); the others
 *       call an all-reduce, print {@code COMM-FAILURE ranks=... group=... millis=... message=...} and
 *       exit 3 when it fails with a {@link CommunicationException}; exit 0 if it wrongly succeeds.</li>
 *   <li>{@code connect}: connects, prints {@code STORE <host:port>} of the rendezvous store, passes
 *       a barrier and exits 0.</li>
 * </ul>
 * Argument 2 is the timeout in milliseconds.
 */
public final class TcpWorkerMain {
    private TcpWorkerMain() {}

    public static void main(String[] args) {
        int code;
        try {
            code = run(args);
        } catch (Throwable t) {
            System.out.println("ERROR " + t);
            t.printStackTrace(System.out);
            code = 1;
        }
        System.out.flush();
        System.exit(code);
    }

    private static int run(String[] args) throws Exception {
        String mode = args[0];
        Duration timeout = Duration.ofMillis(Long.parseLong(args[1]));
        LaunchEnvironment env = LaunchEnvironment.fromSystem();
        Mcore4j.ensureInitialized();
        try (NDManager manager = Mcore4j.newRootManager();
             // ranks start as separate JVMs loading libtorch: on a loaded machine they may be seconds apart,
             // so connecting gets its own generous timeout; collectives keep the one under test
             TcpBackend backend = TcpBackend.builder(env).timeout(timeout).connectTimeout(Duration.ofSeconds(60)).connect()) {
            Communicator world = backend.communicator(
                    ProcessGroup.of("world", IntStream.range(0, env.worldSize()).toArray(), env.rank()));
            if (mode.equals("connect")) {
                System.out.println("STORE " + backend.store().address());
                world.barrier();
                return 0;
            }
            if (mode.equals("collectives")) {
                for (String line : CollectiveScript.run(world, manager)) {
                    System.out.println("RESULT " + line);
                }
                ParallelDims dims = ParallelDims.of(env.worldSize(), 2, env.worldSize() / 2);
                System.out.println("RESULT " + CollectiveScript.groupSums(ProcessGroups.create(dims, backend), env.rank(), manager));
                return 0;
            }
            int victim = Integer.parseInt(args[2]);
            if (env.rank() == victim) {
                System.out.println("HALTING rank " + victim);
                System.out.flush();
                Runtime.getRuntime().halt(17);
            }
            long start = System.nanoTime();
            try {
                world.allReduce(manager.ones(new Shape(16)), ReduceOp.SUM, manager);
                System.out.println("UNEXPECTED-SUCCESS");
                return 0;
            } catch (CommunicationException e) {
                long millis = (System.nanoTime() - start) / 1_000_000;
                System.out.println("COMM-FAILURE ranks=" + e.ranks() + " group=" + e.group() + " millis=" + millis
                        + " message=" + e.getMessage());
                return 3;
            }
        }
    }
}
