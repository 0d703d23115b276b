package io.mcore4j.parallel.inprocess;

import ai.djl.ndarray.NDManager;
import io.mcore4j.core.Mcore4j;
import io.mcore4j.parallel.CommunicationException;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * Runs a task on {@code worldSize} threads, one per rank, over a fresh {@link InJvmFabric}.
 *
 * <p>Each rank gets a {@link Rank}: its global rank, its backend, and a root {@link NDManager}
 * that is closed when the task returns. If a rank throws, the fabric is aborted so that every other
 * rank fails at its next (or current) communication instead of waiting for the timeout, and
 * {@link #run} rethrows the first failure with the others attached as suppressed exceptions.
 */
public final class InJvmWorld {
    /** Default time a rank waits for its peers. */
    public static final Duration DEFAULT_TIMEOUT = Duration.ofSeconds(60);

    private static final String ABORT_OPERATION = "rank task";

    private InJvmWorld() {}

    /** The body one rank runs. */
    @FunctionalInterface
    public interface RankTask<T> {
        /**
         * @param rank this rank's context
         * @return this rank's result
         * @throws Exception anything; aborts the world
         */
        T run(Rank rank) throws Exception;
    }

    /**
     * One rank's context.
     *
     * @param rank global rank
     * @param worldSize number of ranks
     * @param backend this rank's communication backend
     * @param manager root manager of this rank, closed when the task ends
     */
    public record Rank(int rank, int worldSize, InJvmBackend backend, NDManager manager) {
        /**
         * This rank's process groups for a layout over this world.
         *
         * @param dims the layout; its world size must equal this world's
         * @return the groups
         */
        public ProcessGroups groups(ParallelDims dims) {
            return ProcessGroups.create(dims, backend);
        }
    }

    /**
     * Runs {@code task} on every rank with {@link #DEFAULT_TIMEOUT}.
     *
     * @param worldSize number of ranks
     * @param task the per-rank body
     * @param <T> result type
     * @return each rank's result, in rank order
     */
    public static <T> List<T> run(int worldSize, RankTask<T> task) {
        return run(worldSize, DEFAULT_TIMEOUT, task);
    }

    /**
     * Runs {@code task} on every rank.
     *
     * @param worldSize number of ranks
     * @param timeout how long a rank waits for its peers
     * @param task the per-rank body
     * @param <T> result type
     * @return each rank's result, in rank order
     * @throws RankFailedException if any rank threw
     */
    public static <T> List<T> run(int worldSize, Duration timeout, RankTask<T> task) {
        Mcore4j.ensureInitialized();
        InJvmFabric fabric = new InJvmFabric(worldSize, timeout);
        AtomicInteger threadIndex = new AtomicInteger();
        ExecutorService pool = Executors.newFixedThreadPool(worldSize, r -> {
            Thread t = new Thread(r, "rank-" + threadIndex.getAndIncrement());
            t.setDaemon(true);
            return t;
        });
        try {
            List<Future<T>> futures = new ArrayList<>();
            for (int r = 0; r < worldSize; r++) {
                final int rank = r;
                futures.add(pool.submit(() -> {
                    try (NDManager manager = Mcore4j.newRootManager()) {
                        manager.setName("rank-" + rank);
                        return task.run(new Rank(rank, worldSize, fabric.backend(rank), manager));
                    } catch (Throwable e) {
                        fabric.abort(new CommunicationException("world", ABORT_OPERATION, List.of(rank),
                                "rank " + rank + " failed: " + e, e));
                        throw e;
                    }
                }));
            }
            List<T> results = new ArrayList<>();
            List<Throwable> causes = new ArrayList<>();
            List<Integer> failedRanks = new ArrayList<>();
            for (int r = 0; r < worldSize; r++) {
                try {
                    results.add(futures.get(r).get());
                } catch (ExecutionException e) {
                    causes.add(e.getCause());
                    failedRanks.add(r);
                    results.add(null);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    throw new IllegalStateException("interrupted while waiting for rank " + r, e);
                }
            }
            RankFailedException failure = null;
            // the rank that failed on its own comes first; ranks that only saw the abort are consequences
            for (int i = 0; i < causes.size() && failure == null; i++) {
                if (!isAbortEcho(causes.get(i))) {
                    failure = new RankFailedException(failedRanks.get(i), causes.get(i));
                }
            }
            for (int i = 0; i < causes.size(); i++) {
                if (failure == null) {
                    failure = new RankFailedException(failedRanks.get(i), causes.get(i));
                } else if (failure.getCause() != causes.get(i)) {
                    failure.addSuppressed(causes.get(i));
                }
            }
            if (failure != null) {
                throw failure;
            }
            return results;
        } finally {
            pool.shutdownNow();
            fabric.drainMailboxes();
        }
    }

    private static boolean isAbortEcho(Throwable t) {
        return t instanceof CommunicationException ce
                && (ce.getMessage().contains("the world was aborted") || ce.operation().equals(ABORT_OPERATION));
    }

    /** A rank of an in-JVM world threw; the cause is that rank's exception. */
    public static final class RankFailedException extends RuntimeException {
        private static final long serialVersionUID = 1L;
        private final int rank;

        RankFailedException(int rank, Throwable cause) {
            super("rank " + rank + " failed: " + cause, cause);
            this.rank = rank;
        }

        /** @return the rank whose own failure caused the others (the lowest such rank) */
        public int rank() {
            return rank;
        }
    }
}
