package io.mcore4j.parallel.tcp;

import io.mcore4j.parallel.launch.LaunchEnvironment;
import io.mcore4j.parallel.rendezvous.JobToken;

import java.time.Duration;

/**
 * One rank of a TCP job that connects, prints {@code CONNECTED} and then makes no call until its
 * standard input closes, for {@link StallReliabilityTest} to stop with {@code SIGSTOP}. It creates no
 * tensors, so it starts without loading libtorch. Arguments: rank, world size, store port, job token.
 */
public final class IdleRankMain {
    private IdleRankMain() {}

    public static void main(String[] args) throws Exception {
        int rank = Integer.parseInt(args[0]);
        int worldSize = Integer.parseInt(args[1]);
        int port = Integer.parseInt(args[2]);
        try (TcpBackend backend = TcpBackend.builder(LaunchEnvironment.loopback(rank, worldSize, port))
                .jobToken(JobToken.of(args[3])).timeout(Duration.ofSeconds(60)).connectTimeout(Duration.ofSeconds(60)).connect()) {
            System.out.println("CONNECTED");
            System.out.flush();
            while (System.in.read() >= 0) {
                // idle until the test closes standard input
            }
        } catch (RuntimeException e) {
            System.out.println("FAILED " + e.getMessage());
            System.out.flush();
            System.exit(1);
        }
    }
}
