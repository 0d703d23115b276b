package io.mcore4j.parallel.tcp;

import io.mcore4j.parallel.rendezvous.JobToken;

import ai.djl.ndarray.NDManager;
import io.mcore4j.core.Mcore4j;
import io.mcore4j.parallel.launch.LaunchEnvironment;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.ServerSocket;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.function.IntFunction;

/**
 * Runs ranks of a TCP job as threads of this JVM, each with its own {@link TcpBackend} over
 * loopback: the cheap way to test the TCP backend's protocol and failure handling. Every rank's
 * outcome (value or exception, and the seconds its task ran after connecting) is returned, so tests
 * can assert on failures.
 */
final class TcpThreads {
    private TcpThreads() {}

    /** One rank's body, run after its backend has connected. */
    @FunctionalInterface
    interface RankTask<T> {
        T run(int rank, TcpBackend backend, NDManager manager) throws Exception;
    }

    /** What one rank did. */
    record Outcome<T>(T value, Throwable error, double seconds) {}

    static int freePort() {
        try (ServerSocket s = new ServerSocket(0)) {
            return s.getLocalPort();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    static <T> List<Outcome<T>> run(int worldSize, Duration timeout, RankTask<T> task) {
        JobToken token = JobToken.of("threads-" + System.nanoTime());
        return run(worldSize, timeout, Duration.ofSeconds(20), r -> token, task);
    }

    static <T> List<Outcome<T>> run(int worldSize, Duration timeout, Duration connectTimeout, IntFunction<JobToken> tokens,
                                    RankTask<T> task) {
        return run(worldSize, worldSize, freePort(), timeout, connectTimeout, tokens, task);
    }

    /**
     * Runs ranks {@code 0 .. threads-1} of a job of {@code worldSize} ranks as threads, with the
     * store at {@code port} (rank 0 hosts it); the other ranks must be started elsewhere (e.g. as
     * processes) with the same port and token.
     */
    static <T> List<Outcome<T>> run(int threads, int worldSize, int port, Duration timeout, Duration connectTimeout,
                                    IntFunction<JobToken> tokens, RankTask<T> task) {
        Mcore4j.ensureInitialized();
        ExecutorService pool = Executors.newFixedThreadPool(threads);
        try {
            List<Future<Outcome<T>>> futures = new ArrayList<>();
            for (int r = 0; r < threads; r++) {
                int rank = r;
                futures.add(pool.submit(() -> {
                    long start = System.nanoTime();
                    try (NDManager manager = Mcore4j.newRootManager();
                         TcpBackend backend = TcpBackend.builder(LaunchEnvironment.loopback(rank, worldSize, port))
                                 .timeout(timeout)
                                 .connectTimeout(connectTimeout)
                                 .jobToken(tokens.apply(rank))
                                 .connect()) {
                        start = System.nanoTime();
                        T value = task.run(rank, backend, manager);
                        return new Outcome<>(value, null, (System.nanoTime() - start) / 1e9);
                    } catch (Throwable e) {
                        return new Outcome<T>(null, e, (System.nanoTime() - start) / 1e9);
                    }
                }));
            }
            List<Outcome<T>> out = new ArrayList<>();
            for (Future<Outcome<T>> f : futures) {
                out.add(f.get(120, TimeUnit.SECONDS));
            }
            return out;
        } catch (InterruptedException | ExecutionException | TimeoutException e) {
            throw new AssertionError("a rank thread hung or failed outside its task", e);
        } finally {
            pool.shutdownNow();
        }
    }

    /** The values of every rank, failing with the first rank's exception if any failed. */
    static <T> List<T> values(List<Outcome<T>> outcomes) {
        List<T> values = new ArrayList<>();
        for (int r = 0; r < outcomes.size(); r++) {
            Outcome<T> o = outcomes.get(r);
            if (o.error() != null) {
                throw new AssertionError("rank " + r + " failed: " + o.error(), o.error());
            }
            values.add(o.value());
        }
        return values;
    }
}
