package io.mcore4j.samples.bench;

import ai.djl.Device;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.Mcore4j;
import io.mcore4j.core.Tensors;
import io.mcore4j.parallel.Backend;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.ProcessGroup;
import io.mcore4j.parallel.ReduceOp;
import io.mcore4j.parallel.inprocess.InJvmWorld;
import io.mcore4j.samples.launch.FailureReport;
import io.mcore4j.samples.launch.LaunchedRank;
import io.mcore4j.samples.launch.ParallelLayoutOptions;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

import java.io.PrintStream;
import java.time.Duration;
import java.util.List;
import java.util.Locale;

/**
 * Collective bandwidth of mcore4j's communicators, as nccl-tests reports it: for each operation and message size,
 * {@code --iterations} back-to-back calls on the world group after {@code --warmup} untimed ones, timed by the host's
 * clock from a synchronised device to a synchronised device, and one line on rank 0:
 *
 * <pre>collective-benchmark op=all_reduce size=32.0MiB dtype=bf16 ranks=2 | time 123.4 us | algbw 272.0 GB/s | busbw 272.0 GB/s</pre>
 *
 * <p>The size is the bytes of the full tensor: the all-reduce's tensor, the reduce-scatter's input, the all-gather's
 * output (rounded down to a whole number of elements per rank). Time is rank 0's, per call; algbw is size / time
 * (GB = 1e9 bytes); busbw is algbw x 2(n-1)/n for the all-reduces and algbw x (n-1)/n for reduce-scatter and all-gather
 * ({@link Op#busBandwidth}). The calls are the ones the library makes: {@link Communicator#allReduceInPlace},
 * {@link Communicator#reduceScatter} and {@link Communicator#allGather} along dim 0, each of the latter two allocating
 * its result, and with {@code --ops all_reduce_out} {@link Communicator#allReduce}, the out-of-place all-reduce of the
 * tensor-parallel forward. {@code scripts/gpu/collective_bench.py} is the same measurement with {@code torch.distributed}.
 *
 * <p>Ranks: one process per GPU under torchrun (NCCL on {@code gpu(LOCAL_RANK)}, through {@link LaunchedRank}, as
 * {@code pretrain-gpt} connects); without a launcher, {@code --nproc N} threads of this JVM on the CPU (1: a world
 * of one, on the GPU if one is visible).
 */
@Command(name = "collective-benchmark", sortOptions = false)
public final class CollectiveBenchmark {
    /** The collectives measured, under the names {@code --ops} takes (nccl-tests' names). */
    public enum Op {
        /** {@link Communicator#allReduceInPlace} with SUM. */
        all_reduce,
        /**
         * {@link Communicator#allReduce} with SUM into a result allocated per call: the out-of-place all-reduce the
         * tensor-parallel forward makes (a row-parallel layer's output). Not among the defaults.
         */
        all_reduce_out,
        /** {@link Communicator#reduceScatter} along dim 0 with SUM; the size is its input's. */
        reduce_scatter,
        /** {@link Communicator#allGather} along dim 0; the size is its output's. */
        all_gather;

        /**
         * nccl-tests' bus bandwidth: the algorithm bandwidth scaled to what each link carries.
         *
         * @param algbw bytes of the full tensor per second
         * @param ranks the group's size, at least 1
         * @return algbw x 2(n-1)/n for the all-reduces, algbw x (n-1)/n for reduce-scatter and all-gather
         */
        public double busBandwidth(double algbw, int ranks) {
            if (ranks < 1) {
                throw new IllegalArgumentException("ranks " + ranks + " must be at least 1");
            }
            double factor = (ranks - 1) / (double) ranks;
            return algbw * (this == all_reduce || this == all_reduce_out ? 2 * factor : factor);
        }
    }

    /** The element types {@code --dtype} takes. */
    public enum Dtype {
        /** bfloat16, made through {@link DataTypes}. */
        bf16(DataType.BFLOAT16),
        /** float16. */
        fp16(DataType.FLOAT16),
        /** float32. */
        fp32(DataType.FLOAT32);

        private final DataType type;

        Dtype(DataType type) {
            this.type = type;
        }

        /** @return the DJL data type */
        public DataType type() {
            return type;
        }
    }

    @Option(names = "--sizes-mib", split = ",", description = "Message sizes in MiB (the full tensor). Default: 1,4,16,32,64.")
    List<Double> sizesMib = List.of(1.0, 4.0, 16.0, 32.0, 64.0);
    @Option(names = "--dtype", description = "${COMPLETION-CANDIDATES}. Default: ${DEFAULT-VALUE}.")
    Dtype dtype = Dtype.bf16;
    @Option(names = "--iterations", description = "Timed calls per operation and size. Default: ${DEFAULT-VALUE}.")
    int iterations = 50;
    @Option(names = "--warmup", description = "Untimed calls before them, per operation and size: enough for the JIT to"
            + " compile the call path (with 10, the interpreted Java side added ~80-170 us a call). Default: ${DEFAULT-VALUE}.")
    int warmup = 2000;
    @Option(names = "--ops", split = ",", description = "Operations, of ${COMPLETION-CANDIDATES}. Default:"
            + " all_reduce,reduce_scatter,all_gather.")
    List<Op> ops = List.of(Op.all_reduce, Op.reduce_scatter, Op.all_gather);
    @Option(names = "--nproc", description = "Without a launcher: ranks as threads of this JVM, on the CPU."
            + " Default: ${DEFAULT-VALUE}.")
    int nproc = 1;
    @Option(names = "--timeout-minutes", description = "How long a rank waits for its peers. Default: ${DEFAULT-VALUE}.")
    double timeoutMinutes = 5;

    private CollectiveBenchmark() {}

    /** @param argv flags, see the class comment and {@code --help} */
    public static void main(String[] argv) {
        System.exit(execute(argv, System.out, System.err));
    }

    /**
     * Runs the benchmark without exiting the JVM.
     *
     * @param argv flags, see the class comment and {@code --help}
     * @param out where rank 0's lines go
     * @param err where errors go
     * @return 0 done, 2 a bad flag or value, 1 a failed run
     */
    public static int execute(String[] argv, PrintStream out, PrintStream err) {
        String name = "collective-benchmark";
        CollectiveBenchmark bench = new CollectiveBenchmark();
        CommandLine cmd = new CommandLine(bench);
        cmd.getCommandSpec().mixinStandardHelpOptions(true);
        try {
            cmd.parseArgs(argv);
            if (cmd.isUsageHelpRequested()) {
                cmd.usage(out);
                return 0;
            }
            bench.validate();
        } catch (CommandLine.ParameterException | IllegalArgumentException e) {
            err.println(name + ": " + FailureReport.oneLine(e.getMessage()) + " ('" + name + " --help' lists the flags)");
            return 2;
        }
        try {
            bench.run(out);
            return 0;
        } catch (Exception | OutOfMemoryError e) {
            return FailureReport.report(name, e, err);
        }
    }

    private void validate() {
        if (iterations < 1 || warmup < 0 || nproc < 1 || !(timeoutMinutes > 0)) {
            throw new IllegalArgumentException("--iterations " + iterations + " must be at least 1, --warmup " + warmup
                    + " at least 0, --nproc " + nproc + " at least 1, --timeout-minutes " + timeoutMinutes + " above 0");
        }
        if (sizesMib.isEmpty() || ops.isEmpty()) {
            throw new IllegalArgumentException("--sizes-mib and --ops need at least one value each");
        }
        for (double size : sizesMib) {
            if (!(size > 0)) {
                throw new IllegalArgumentException("--sizes-mib " + size + " must be above 0");
            }
        }
        if (nproc > 1 && ParallelLayoutOptions.launched()) {
            throw new IllegalArgumentException("--nproc " + nproc + " is for a run without a launcher; this process was"
                    + " launched as a rank (RANK is set), so the launcher decides the ranks");
        }
    }

    private void run(PrintStream out) throws Exception {
        Mcore4j.ensureInitialized();
        Duration timeout = Duration.ofMillis((long) (timeoutMinutes * 60_000));
        if (ParallelLayoutOptions.launched() || nproc == 1) {
            LaunchedRank rank = ParallelLayoutOptions.launched() ? LaunchedRank.connect(timeout) : LaunchedRank.single(timeout);
            try (Backend backend = rank.backend(); NDManager root = NDManager.newBaseManager(rank.device())) {
                measure(backend, root, rank.device(), out);
            }
            return;
        }
        InJvmWorld.run(nproc, timeout, rank -> {
            measure(rank.backend(), rank.manager(), Device.cpu(), out);
            return null;
        });
    }

    /** Every operation and size on the world group of {@code backend}; rank 0 prints. */
    private void measure(Backend backend, NDManager root, Device device, PrintStream out) {
        int n = backend.worldSize();
        int[] all = new int[n];
        for (int r = 0; r < n; r++) {
            all[r] = r;
        }
        Communicator world = backend.communicator(ProcessGroup.of("world", all, backend.worldRank()));
        for (Op op : ops) {
            for (double mib : sizesMib) {
                long elements = elements(mib, dtype, n);
                double seconds = time(world, op, root, device, elements);
                if (backend.worldRank() == 0) {
                    out.println(line("collective-benchmark", op, elements * dtype.type().getNumOfBytes(), dtype, n, seconds));
                }
            }
        }
    }

    /** Seconds per call of {@code op} on a full tensor of {@code elements}. */
    private double time(Communicator world, Op op, NDManager root, Device device, long elements) {
        try (NDManager m = root.newSubManager(device)) {
            // zeros: sums of zeros stay finite however many times the all-reduce runs in place
            NDArray full = DataTypes.zeros(m, new Shape(elements), dtype.type(), device);
            NDArray piece = DataTypes.zeros(m, new Shape(elements / world.size()), dtype.type(), device);
            for (int i = 0; i < warmup; i++) {
                call(world, op, full, piece, m);
            }
            Tensors.awaitDevice(m);
            world.barrier(); // the ranks start the timed calls together
            long start = System.nanoTime();
            for (int i = 0; i < iterations; i++) {
                call(world, op, full, piece, m);
            }
            Tensors.awaitDevice(m);
            return (System.nanoTime() - start) / 1e9 / iterations;
        }
    }

    private static void call(Communicator world, Op op, NDArray full, NDArray piece, NDManager m) {
        switch (op) {
            case all_reduce -> world.allReduceInPlace(full, ReduceOp.SUM);
            case all_reduce_out -> {
                try (NDManager result = m.newSubManager()) {
                    world.allReduce(full, ReduceOp.SUM, result);
                }
            }
            case reduce_scatter -> {
                try (NDManager result = m.newSubManager()) {
                    world.reduceScatter(full, 0, ReduceOp.SUM, result);
                }
            }
            case all_gather -> {
                try (NDManager result = m.newSubManager()) {
                    world.allGather(piece, 0, result);
                }
            }
        }
    }

    /**
     * The elements of a full tensor of {@code mib} MiB: rounded down to a multiple of {@code ranks}, so that every
     * rank holds as many of a reduce-scatter's result or an all-gather's input.
     *
     * @param mib the size in MiB
     * @param dtype the element type
     * @param ranks the group's size
     * @return the element count, at least {@code ranks}
     * @throws IllegalArgumentException if the size holds fewer than one element per rank
     */
    public static long elements(double mib, Dtype dtype, int ranks) {
        long all = (long) (mib * (1L << 20)) / dtype.type().getNumOfBytes();
        long perRank = all / ranks;
        if (perRank < 1) {
            throw new IllegalArgumentException("--sizes-mib " + mib + " holds " + all + " " + dtype + " elements, fewer"
                    + " than one for each of " + ranks + " ranks");
        }
        return perRank * ranks;
    }

    /**
     * One result line, in the format {@code scripts/gpu/collective_bench.py} prints too.
     *
     * @param prefix the line's first word
     * @param op the operation
     * @param bytes bytes of the full tensor
     * @param dtype its element type
     * @param ranks the group's size
     * @param seconds time per call
     * @return e.g. {@code collective-benchmark op=all_reduce size=32.0MiB dtype=bf16 ranks=2 | time 123.4 us |
     *     algbw 272.0 GB/s | busbw 272.0 GB/s}
     */
    public static String line(String prefix, Op op, long bytes, Dtype dtype, int ranks, double seconds) {
        double algbw = bytes / seconds;
        return String.format(Locale.ROOT, "%s op=%s size=%.1fMiB dtype=%s ranks=%d | time %.1f us | algbw %.1f GB/s"
                        + " | busbw %.1f GB/s", prefix, op, bytes / (double) (1L << 20), dtype, ranks, seconds * 1e6,
                algbw / 1e9, op.busBandwidth(algbw, ranks) / 1e9);
    }
}
