package io.mcore4j.parallel.nccl;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.Mcore4j;
import io.mcore4j.parallel.ChunkLayout;
import io.mcore4j.parallel.CommunicationException;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.PendingCollective;
import io.mcore4j.parallel.ProcessGroup;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.ReduceOp;
import io.mcore4j.parallel.launch.LaunchEnvironment;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.stream.IntStream;

/**
 * The GPU check of the NCCL backend, one process per GPU:
 * {@code torchrun --standalone --nproc_per_node=N --no-python java -cp ... io.mcore4j.parallel.nccl.NcclCollectivesCheck}.
 *
 * <p>Every collective, for every dtype, on CUDA tensors, over the world group, the groups of
 * {@code ParallelDims.of(N, 2, 1)} (tp, dp and a group of one), and a world communicator whose
 * transfers are split into 24-byte chunks (the chunked code paths). Rank {@code r} of a group
 * contributes {@code (r + 1) * (i % 7 - 3) + r} at element {@code i}, as in parallel-state's
 * {@code InJvmCollectivesTest}; results are compared with the serial computation in Java: exactly
 * for integers, within 1e-6 (fp32), 1e-2 (fp16), 1e-12 (fp64) of the operands' magnitude for floats.
 * Then a 2 GiB+ fp16 all-reduce (the large-tensor address path and 1 GiB chunks) checked on the
 * device, a leak check, and two benchmark lines. Prints one line per check and
 * {@code N passed, M failed}; exits 1 on any failure.
 *
 * <p>{@code --kill-rank K}: after a warm-up, rank K halts (exit 17) before an all-reduce; the others
 * must fail with a {@link CommunicationException} naming the world group and the all-reduce within
 * the 10 s timeout; they print it and exit 3 (any other outcome exits 1). Under torchrun pass
 * {@code --monitor-interval=30}, or torchrun kills the others as soon as rank K exits.
 * Options: {@code --timeout-s S} (default 60), {@code --skip-large}. With {@code -Dmcore4j.nccl.peerCopies=true} the
 * started all-gathers and all-to-alls travel by copy engine; {@code -Dmcore4j.nccl.peerCopySlotBytes=16} cuts their
 * messages into many handshakes; {@code -Dmcore4j.nccl.peerReductions=true} adds the sums (all-reduces, started
 * reduce-scatters) of float32, float16 and bfloat16 tensors whose per-rank parts are 16-byte multiples (at 2 ranks
 * the float32 ones of these checks; the others stay on NCCL).
 */
public final class NcclCollectivesCheck {
    private static final List<DataType> DTYPES =
            List.of(DataType.FLOAT32, DataType.FLOAT16, DataType.INT32, DataType.INT64, DataType.FLOAT64);
    private static final int ROWS = 8;
    private static final int COLS = 3;

    private final NDManager manager;
    private final CheckReport report;
    private boolean quiet;

    NcclCollectivesCheck(NDManager manager, CheckReport report) {
        this.manager = manager;
        this.report = report;
    }

    /**
     * @param args {@code [--kill-rank K] [--timeout-s S] [--skip-large]}
     */
    public static void main(String[] args) {
        int killRank = -1;
        long timeoutSeconds = 60;
        boolean large = true;
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--kill-rank" -> killRank = Integer.parseInt(args[++i]);
                case "--timeout-s" -> timeoutSeconds = Long.parseLong(args[++i]);
                case "--skip-large" -> large = false;
                default -> throw new IllegalArgumentException("unknown argument " + args[i]
                        + "; use --kill-rank K, --timeout-s S, --skip-large");
            }
        }
        Mcore4j.ensureInitialized();
        LaunchEnvironment env = LaunchEnvironment.fromSystem();
        Duration timeout = Duration.ofSeconds(killRank >= 0 ? 10 : timeoutSeconds);
        try {
            long start = System.nanoTime();
            NcclBackend backend = NcclBackend.connect(env, timeout);
            System.out.printf("[rank %d] connected: %s in %.1f s%n", env.rank(), backend, (System.nanoTime() - start) / 1e9);
            if (killRank >= 0) {
                killCheck(backend, killRank);
                return;
            }
            int failed;
            try (NDManager manager = NDManager.newBaseManager(backend.device())) {
                CheckReport report = new CheckReport(env.rank(), System.out);
                new NcclCollectivesCheck(manager, report).runAll(backend, large);
                System.out.println(report.summary());
                failed = report.failed();
            }
            long closing = System.nanoTime();
            backend.close();
            System.out.printf("[rank %d] closed in %.1f s%n", env.rank(), (System.nanoTime() - closing) / 1e9);
            System.out.flush();
            System.exit(failed == 0 ? 0 : 1);
        } catch (Throwable t) {
            t.printStackTrace();
            System.out.println("[rank " + env.rank() + "] FAIL aborted by " + t);
            exit(1);
        }
    }

    private void runAll(NcclBackend backend, boolean large) {
        int n = backend.worldSize();
        long start = System.nanoTime();
        ProcessGroups groups = ProcessGroups.create(ParallelDims.of(n, n % 2 == 0 ? 2 : 1, 1), backend);
        Communicator chunked = backend.communicator(ProcessGroup.of("world-chunked", IntStream.range(0, n).toArray(),
                backend.worldRank()), 24);
        System.out.printf("[rank %d] created %s in %.1f s%n", backend.worldRank(), groups, (System.nanoTime() - start) / 1e9);
        List<Communicator> all = List.of(backend.world(), groups.tp(), groups.dp(), groups.pp(), chunked);
        for (Communicator c : all) {
            suite(c);
        }
        int before = manager.getManagedArrays().size();
        quiet = true; // repeats print only failures
        for (int step = 0; step < 3; step++) {
            suite(groups.world());
        }
        quiet = false;
        int after = manager.getManagedArrays().size();
        report.run("no native-array growth over 3 repeated suites (live " + before + " -> " + after + ")",
                () -> after == before ? null : "grew by " + (after - before));
        if (large) {
            largeAllReduce(backend.world());
        }
        bench(backend.world());
    }

    // ---- the suite ----

    static double value(int rank, int i) {
        return (rank + 1) * (i % 7 - 3) + rank;
    }

    private static NDArray contribution(NDManager m, int rank, DataType dtype, long rows, long cols) {
        double[] v = new double[(int) (rows * cols)];
        for (int i = 0; i < v.length; i++) {
            v[i] = value(rank, i);
        }
        return m.create(v, new Shape(rows, cols)).toType(dtype, false);
    }

    /** Every collective for every dtype over {@code c}; package-private so a CPU test can check the references. */
    void suite(Communicator c) {
        int me = c.rank();
        int size = c.size();
        String g = c.group().key();
        int n = ROWS * COLS;
        double scale = 4.0 * size;
        for (DataType dtype : DTYPES) {
            try (NDManager s = manager.newSubManager()) {
                NDArray x = contribution(s, me, dtype, ROWS, COLS);
                double[] sum = new double[n];
                double[] max = new double[n];
                double[] min = new double[n];
                double[] avg = new double[n];
                for (int i = 0; i < n; i++) {
                    max[i] = Double.NEGATIVE_INFINITY;
                    min[i] = Double.POSITIVE_INFINITY;
                    for (int r = 0; r < size; r++) {
                        sum[i] += value(r, i);
                        max[i] = Math.max(max[i], value(r, i));
                        min[i] = Math.min(min[i], value(r, i));
                    }
                    avg[i] = sum[i] / size;
                    if (dtype != DataType.FLOAT32 && dtype != DataType.FLOAT16 && dtype != DataType.FLOAT64) {
                        avg[i] = (long) avg[i]; // integer average truncates toward zero
                    }
                }
                Shape shape = new Shape(ROWS, COLS);
                String t = " " + dtype + " " + g;
                check(c, "all-reduce SUM" + t, () -> CheckReport.compare(sum, shape, c.allReduce(x, ReduceOp.SUM, s), dtype, scale));
                check(c, "all-reduce MAX" + t, () -> CheckReport.compare(max, shape, c.allReduce(x, ReduceOp.MAX, s), dtype, scale));
                check(c, "all-reduce MIN" + t, () -> CheckReport.compare(min, shape, c.allReduce(x, ReduceOp.MIN, s), dtype, scale));
                check(c, "all-reduce AVG" + t, () -> CheckReport.compare(avg, shape, c.allReduce(x, ReduceOp.AVG, s), dtype, scale));
                check(c, "all-reduce-in-place SUM" + t, () -> {
                    NDArray y = x.duplicate();
                    c.allReduceInPlace(y, ReduceOp.SUM);
                    return CheckReport.compare(sum, shape, y, dtype, scale);
                });
                check(c, "all-reduce SUM non-contiguous" + t, () -> {
                    double[] expected = new double[n];
                    for (int col = 0; col < COLS; col++) {
                        for (int row = 0; row < ROWS; row++) {
                            expected[col * ROWS + row] = sum[row * COLS + col];
                        }
                    }
                    return CheckReport.compare(expected, new Shape(COLS, ROWS), c.allReduce(x.transpose(), ReduceOp.SUM, s), dtype, scale);
                });
                check(c, "all-gather dim 0" + t, () -> {
                    double[] expected = gatheredRows(n, size);
                    return CheckReport.compare(expected, new Shape(ROWS * size, COLS), c.allGather(x, 0, s), dtype, scale);
                });
                check(c, "all-gather dim 1" + t, () -> {
                    double[] expected = new double[n * size];
                    for (int r = 0; r < size; r++) {
                        for (int row = 0; row < ROWS; row++) {
                            for (int col = 0; col < COLS; col++) {
                                expected[row * COLS * size + r * COLS + col] = value(r, row * COLS + col);
                            }
                        }
                    }
                    return CheckReport.compare(expected, new Shape(ROWS, COLS * size), c.allGather(x, 1, s), dtype, scale);
                });
                if (ROWS % size == 0) {
                    check(c, "reduce-scatter SUM dim 0" + t, () -> {
                        int rows = ROWS / size;
                        double[] expected = Arrays.copyOfRange(sum, me * rows * COLS, (me + 1) * rows * COLS);
                        return CheckReport.compare(expected, new Shape(rows, COLS), c.reduceScatter(x, 0, ReduceOp.SUM, s), dtype, scale);
                    });
                    check(c, "started reduce-scatter SUM, overlapping an all-reduce" + t, () -> {
                        int rows = ROWS / size;
                        double[] expected = Arrays.copyOfRange(sum, me * rows * COLS, (me + 1) * rows * COLS);
                        PendingCollective pending = c.startReduceScatter(x, ReduceOp.SUM, s);
                        NDArray meanwhile = c.allReduce(x, ReduceOp.MAX, s); // ordered after the started one
                        String first = CheckReport.compare(expected, new Shape(rows, COLS), pending.await(), dtype, scale);
                        return first != null ? first : CheckReport.compare(max, shape, meanwhile, dtype, scale);
                    });
                }
                check(c, "started all-gather dim 0, overlapping an all-reduce" + t, () -> {
                    double[] expected = gatheredRows(n, size);
                    PendingCollective pending = c.startAllGather(x, s);
                    NDArray meanwhile = c.allReduce(x, ReduceOp.MAX, s); // ordered after the started one
                    String first = CheckReport.compare(expected, new Shape(ROWS * size, COLS), pending.await(), dtype, scale);
                    return first != null ? first : CheckReport.compare(max, shape, meanwhile, dtype, scale);
                });
                check(c, "two started collectives joined in reverse order, then an all-reduce" + t, () -> {
                    double[] expected = gatheredRows(n, size);
                    // the second starts with no wait on the first; each join waits for its own; the all-reduce
                    // on the caller's stream comes after both
                    PendingCollective gather = c.startAllGather(x, s);
                    NDArray y = x.duplicate();
                    PendingCollective reduce = c.startAllReduceInPlace(y, ReduceOp.SUM);
                    String summed = CheckReport.compare(sum, shape, reduce.await(), dtype, scale);
                    String gathered = CheckReport.compare(expected, new Shape(ROWS * size, COLS), gather.await(), dtype, scale);
                    NDArray after = c.allReduce(x, ReduceOp.MIN, s);
                    return summed != null ? summed : gathered != null ? gathered : CheckReport.compare(min, shape, after, dtype, scale);
                });
                check(c, "started all-reduce-in-place SUM" + t, () -> {
                    NDArray y = x.duplicate();
                    PendingCollective pending = c.startAllReduceInPlace(y, ReduceOp.SUM);
                    return CheckReport.compare(sum, shape, pending.await(), dtype, scale);
                });
                check(c, "reduce-scatter SUM dim 1" + t, () -> {
                    int width = 2 * size;
                    NDArray wide = contribution(s, me, dtype, ROWS, width);
                    double[] expected = new double[ROWS * 2];
                    for (int row = 0; row < ROWS; row++) {
                        for (int j = 0; j < 2; j++) {
                            for (int r = 0; r < size; r++) {
                                expected[row * 2 + j] += value(r, row * width + me * 2 + j);
                            }
                        }
                    }
                    return CheckReport.compare(expected, new Shape(ROWS, 2), c.reduceScatter(wide, 1, ReduceOp.SUM, s), dtype, scale);
                });
                check(c, "broadcast from last" + t, () -> {
                    double[] expected = new double[n];
                    for (int i = 0; i < n; i++) {
                        expected[i] = value(size - 1, i);
                    }
                    return CheckReport.compare(expected, shape, c.broadcast(x, size - 1, s), dtype, scale);
                });
            }
        }
        for (DataType dtype : List.of(DataType.FLOAT32, DataType.FLOAT16, DataType.INT64)) {
            check(c, "all-to-all uneven " + dtype + " " + g, () -> allToAll(c, dtype, false));
            check(c, "started all-to-all uneven " + dtype + " " + g, () -> allToAll(c, dtype, true));
        }
        for (DataType dtype : List.of(DataType.FLOAT32, DataType.FLOAT16)) {
            check(c, "all-to-all of chunks " + dtype + " " + g, () -> allToAllChunks(c, dtype));
        }
        check(c, "send/recv ring int64 " + g, () -> ring(c));
        check(c, "all-gather-bytes " + g, () -> {
            byte[] mine = new byte[me];
            for (int k = 0; k < me; k++) {
                mine[k] = (byte) (10 * me + k);
            }
            List<byte[]> got = c.allGatherBytes(mine);
            for (int r = 0; r < size; r++) {
                byte[] expected = new byte[r];
                for (int k = 0; k < r; k++) {
                    expected[k] = (byte) (10 * r + k);
                }
                if (!Arrays.equals(expected, got.get(r))) {
                    return "rank " + r + " gave " + Arrays.toString(got.get(r)) + ", expected " + Arrays.toString(expected);
                }
            }
            return null;
        });
        check(c, "barrier " + g, () -> {
            c.barrier();
            return null;
        });
    }

    /**
     * Rank s sends (s + j) % 3 rows to rank j, each row [100 s + j, -(100 s + j)], as in InJvmCollectivesTest; with
     * {@code started}, through {@link Communicator#startAllToAll}.
     */
    private String allToAll(Communicator c, DataType dtype, boolean started) {
        int me = c.rank();
        int size = c.size();
        long[] send = new long[size];
        long[] recv = new long[size];
        for (int j = 0; j < size; j++) {
            send[j] = (me + j) % 3;
            recv[j] = (j + me) % 3;
        }
        long rows = Arrays.stream(send).sum();
        double[] data = new double[(int) rows * 2];
        int k = 0;
        for (int j = 0; j < size; j++) {
            for (int row = 0; row < send[j]; row++) {
                data[k++] = 100 * me + j;
                data[k++] = -(100 * me + j);
            }
        }
        double[] expected = new double[(int) Arrays.stream(recv).sum() * 2];
        k = 0;
        for (int s = 0; s < size; s++) {
            for (int row = 0; row < recv[s]; row++) {
                expected[k++] = 100 * s + me;
                expected[k++] = -(100 * s + me);
            }
        }
        try (NDManager s = manager.newSubManager()) {
            NDArray input = s.create(data, new Shape(rows, 2)).toType(dtype, false);
            NDArray out = started ? c.startAllToAll(input, send, recv, s).await() : c.allToAll(input, send, recv, s);
            return CheckReport.compare(expected, new Shape(expected.length / 2, 2), out, dtype, 0);
        }
    }

    /**
     * {@link Communicator#allToAllChunks} in the shape of the expert dispatch, as parallel-state's ChunkLayoutTest:
     * rank s sends rank j {@code (s + 2j + l) % 3} rows for each of 3 local experts l, laid out expert by expert on
     * both sides; row r of them holds {@code 200 s + 20 j + 5 l + r} (exact in float16 up to 8 ranks). Then the same
     * exchange started on the side stream into a tensor given ({@link Communicator#startAllToAllChunks}), and the
     * transpose, which must give back the input.
     */
    private String allToAllChunks(Communicator c, DataType dtype) {
        int me = c.rank();
        int size = c.size();
        int experts = 3;
        long[][][] sizes = new long[2][size][experts]; // [send / recv][peer][expert]
        long[][][] offsets = new long[2][size][experts];
        long[] at = new long[2];
        for (int l = 0; l < experts; l++) {
            for (int j = 0; j < size; j++) {
                sizes[0][j][l] = (me + 2L * j + l) % 3;
                sizes[1][j][l] = (j + 2L * me + l) % 3;
                for (int side = 0; side < 2; side++) {
                    offsets[side][j][l] = at[side];
                    at[side] += sizes[side][j][l];
                }
            }
        }
        ChunkLayout send = new ChunkLayout(sizes[0], offsets[0], at[0]);
        ChunkLayout recv = new ChunkLayout(sizes[1], offsets[1], at[1]);
        double[] data = new double[(int) at[0] * 2];
        double[] expected = new double[(int) at[1] * 2];
        for (int j = 0; j < size; j++) {
            for (int l = 0; l < experts; l++) {
                for (int r = 0; r < sizes[0][j][l]; r++) {
                    int row = (int) (offsets[0][j][l] + r);
                    data[2 * row] = 200 * me + 20 * j + 5 * l + r;
                    data[2 * row + 1] = -data[2 * row];
                }
                for (int r = 0; r < sizes[1][j][l]; r++) {
                    int row = (int) (offsets[1][j][l] + r);
                    expected[2 * row] = 200 * j + 20 * me + 5 * l + r;
                    expected[2 * row + 1] = -expected[2 * row];
                }
            }
        }
        try (NDManager s = manager.newSubManager()) {
            NDArray input = s.create(data, new Shape(at[0], 2)).toType(dtype, false);
            NDArray out = c.allToAllChunks(input, send, recv, s);
            String error = CheckReport.compare(expected, new Shape(at[1], 2), out, dtype, 0);
            if (error != null) {
                return error;
            }
            // started on the side stream, into a tensor given
            NDArray target = s.create(new double[(int) at[1] * 2], new Shape(at[1], 2)).toType(dtype, false);
            error = CheckReport.compare(expected, new Shape(at[1], 2), c.startAllToAllChunks(input, send, recv, target).await(),
                    dtype, 0);
            return error != null ? "started: " + error
                    : CheckReport.compare(data, new Shape(at[0], 2), c.allToAllChunks(out, recv, send, s), dtype, 0);
        }
    }

    /**
     * Every rank sends two messages to the next and receives two from the previous. NCCL sends
     * complete only when received, so even ranks send first and odd ranks receive first.
     */
    private String ring(Communicator c) {
        int me = c.rank();
        int size = c.size();
        int next = (me + 1) % size;
        int prev = (me + size - 1) % size;
        try (NDManager s = manager.newSubManager()) {
            List<long[]> got = new ArrayList<>();
            boolean sendFirst = me % 2 == 0 || size == 1;
            if (sendFirst) {
                c.send(s.create(new long[] {me, 1}), next);
                c.send(s.create(new long[] {me, 2}), next);
            }
            got.add(c.recv(new Shape(2), DataType.INT64, prev, s).toLongArray());
            got.add(c.recv(new Shape(2), DataType.INT64, prev, s).toLongArray());
            if (!sendFirst) {
                c.send(s.create(new long[] {me, 1}), next);
                c.send(s.create(new long[] {me, 2}), next);
            }
            for (int m = 0; m < 2; m++) {
                if (!Arrays.equals(new long[] {prev, m + 1}, got.get(m))) {
                    return "message " + m + " from rank " + prev + " was " + Arrays.toString(got.get(m));
                }
            }
            return null;
        }
    }

    /** A 2 GiB+ fp16 all-reduce: the one-element-view address path and 1 GiB chunks; compared on the device. */
    /** What an all-gather along dim 0 gives: every rank's {@code n} contributions, rank after rank. */
    private static double[] gatheredRows(int n, int size) {
        double[] expected = new double[n * size];
        for (int r = 0; r < size; r++) {
            for (int i = 0; i < n; i++) {
                expected[r * n + i] = value(r, i);
            }
        }
        return expected;
    }

    private void largeAllReduce(Communicator world) {
        int size = world.size();
        int me = world.rank();
        int count = (1 << 30) + (1 << 20);
        report.run("all-reduce SUM float16 " + count + " elements (" + (2L * count >> 20) + " MiB) " + world.group().key(), () -> {
            try (NDManager s = manager.newSubManager()) {
                NDArray pattern = s.arange(0, count, 1).mod(7).sub(3); // int32, i % 7 - 3
                NDArray x = pattern.mul(me + 1).add(me).toType(DataType.FLOAT16, false);
                long t0 = System.nanoTime();
                NDArray got = world.allReduce(x, ReduceOp.SUM, s);
                world.barrier(); // collectives return once enqueued: wait for the work before reading the clock
                double ms = (System.nanoTime() - t0) / 1e6;
                int ranksPlusOne = size * (size + 1) / 2;
                int ranks = size * (size - 1) / 2;
                NDArray expected = pattern.mul(ranksPlusOne).add(ranks);
                long wrong = got.toType(DataType.INT32, false).eq(expected).logicalNot().countNonzero().getLong();
                System.out.printf("[rank %d] large all-reduce took %.1f ms%n", me, ms);
                return wrong == 0 ? null : wrong + " elements differ";
            }
        });
    }

    private void bench(Communicator world) {
        int size = world.size();
        try (NDManager s = manager.newSubManager()) {
            long elements = 128L << 20; // 256 MiB of fp16
            NDArray x = s.ones(new Shape(elements), DataType.FLOAT16);
            for (int i = 0; i < 5; i++) {
                world.allReduceInPlace(x, ReduceOp.MAX);
            }
            int iters = 20;
            world.barrier();
            long t0 = System.nanoTime();
            for (int i = 0; i < iters; i++) {
                world.allReduceInPlace(x, ReduceOp.MAX); // MAX moves the same bytes as SUM and keeps the values finite
            }
            world.barrier(); // collectives return once enqueued; the barrier waits on the host
            double sec = (System.nanoTime() - t0) / 1e9 / iters;
            double busBw = 2.0 * (size - 1) / size * elements * 2 / sec / 1e9;
            System.out.printf("[rank %d] BENCH all-reduce MAX fp16 256 MiB in place: %.3f ms, bus bandwidth %.1f GB/s%n",
                    world.group().globalRank(world.rank()), sec * 1e3, busBw);
            NDArray small = s.ones(new Shape(2), DataType.FLOAT32);
            for (int i = 0; i < 50; i++) {
                world.allReduceInPlace(small, ReduceOp.MAX);
            }
            iters = 1000;
            world.barrier();
            t0 = System.nanoTime();
            for (int i = 0; i < iters; i++) {
                world.allReduceInPlace(small, ReduceOp.MAX);
            }
            long enqueued = System.nanoTime();
            world.barrier();
            System.out.printf("[rank %d] BENCH all-reduce fp32 8 bytes, 1000 back to back: host %.1f us each, done after %.1f us each%n",
                    world.group().globalRank(world.rank()), (enqueued - t0) / 1e3 / iters, (System.nanoTime() - t0) / 1e3 / iters);
        } catch (RuntimeException e) {
            report.fail("benchmark", e.toString());
        }
    }

    private void check(Communicator c, String name, CheckReport.Check check) {
        if (!quiet) {
            report.run(name, check);
            return;
        }
        try {
            String failure = check.run();
            if (failure != null) {
                report.fail("repeat " + name, failure);
            }
        } catch (Exception e) {
            report.fail("repeat " + name, e.toString());
        }
    }

    // ---- --kill-rank ----

    private static void killCheck(NcclBackend backend, int killRank) {
        int me = backend.worldRank();
        Communicator world = backend.world();
        if (killRank < 0 || killRank >= backend.worldSize()) {
            throw new IllegalArgumentException("--kill-rank " + killRank + " is outside [0, " + backend.worldSize() + ")");
        }
        try (NDManager m = NDManager.newBaseManager(backend.device())) {
            NDArray x = m.ones(new Shape(1 << 16), DataType.FLOAT32);
            world.allReduce(x, ReduceOp.SUM, m); // connects the ring and sets up this size's algorithm
            world.barrier();
            if (me == killRank) {
                System.out.println("[rank " + me + "] halting (exit 17) before the all-reduce");
                System.out.flush();
                Runtime.getRuntime().halt(17);
            }
            long t0 = System.nanoTime();
            try {
                // the all-reduce returns once enqueued; the barrier waits on the host and fails once the
                // watchdog has aborted the communicator for the all-reduce
                world.allReduce(x, ReduceOp.SUM, m);
                world.barrier();
                System.out.println("[rank " + me + "] FAIL the all-reduce completed without rank " + killRank);
                exit(1);
            } catch (CommunicationException e) {
                double seconds = (System.nanoTime() - t0) / 1e9;
                System.out.printf("[rank %d] CommunicationException after %.1f s: %s%n", me, seconds, e.getMessage());
                boolean named = e.group().equals(world.group().key()) && e.getMessage().contains("all-reduce SUM");
                boolean inTime = seconds < world.timeout().toSeconds() + 5;
                boolean brokenAfter;
                try {
                    world.barrier();
                    brokenAfter = false;
                } catch (CommunicationException again) {
                    brokenAfter = true;
                }
                System.out.println("[rank " + me + "] " + (named && inTime && brokenAfter ? "PASS" : "FAIL")
                        + " kill-rank " + killRank + ": names group and operation " + named + ", within timeout " + inTime
                        + ", later calls fail at once " + brokenAfter);
                exit(named && inTime && brokenAfter ? 3 : 1);
            }
        }
    }

    /** Exits without shutdown hooks: a communicator with a dead peer must not hold the process. */
    private static void exit(int status) {
        System.out.flush();
        Runtime.getRuntime().halt(status);
    }
}
