package io.mcore4j.checkpoint;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.shard.ShardedTensor;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;

/**
 * Save and load throughput of a 1 GiB fp32 model state on 4 in-JVM ranks, against a raw sequential
 * write (and read) of the same number of bytes on the same disk. Not a test: run it by hand.
 *
 * <p>State: 16 tensors of [4096, 4096] fp32, split along dim 0 over 4 ranks (256 MiB per rank).
 * Timings span the whole collective (barrier to barrier, as seen by rank 0). Saves fsync every file;
 * loads verify every CRC32C. Loads read files just written, so they come from the page cache, and so
 * does the raw read they are compared with. Each figure is the median of {@code REPEATS} runs.
 *
 * <p>Usage: {@code CheckpointBenchmark [directory [MiB]]}; the directory defaults to a fresh one
 * under {@code java.io.tmpdir} and is deleted afterwards.
 */
public final class CheckpointBenchmark {
    private static final int RANKS = 4;
    private static final int REPEATS = 3;
    private static final long COLUMNS = 4096;

    private CheckpointBenchmark() {}

    /**
     * @param args optional directory and size in MiB (default 1024)
     * @throws Exception on I/O failure
     */
    public static void main(String[] args) throws Exception {
        Path base = args.length > 0 ? Path.of(args[0]) : Path.of(System.getProperty("java.io.tmpdir"));
        long mib = args.length > 1 ? Long.parseLong(args[1]) : 1024;
        Path dir = Files.createTempDirectory(base, "mcore4j-ckpt-bench-");
        long bytes = mib << 20;
        int tensors = (int) (bytes / (COLUMNS * COLUMNS * 4));
        long rows = tensors == 0 ? bytes / (COLUMNS * 4) : COLUMNS;
        tensors = Math.max(1, tensors);
        long total = tensors * rows * COLUMNS * 4;
        System.out.printf("state: %d tensors of [%d, %d] fp32 = %.3f GB on %d in-JVM ranks; directory %s%n",
                tensors, rows, COLUMNS, total / 1e9, RANKS, dir);
        try {
            double rawWrite = median(() -> rawWrite(dir.resolve("raw.bin"), total, 1));
            double rawWrite4 = median(() -> rawWrite(dir.resolve("raw.bin"), total, RANKS));
            double rawRead = median(() -> rawRead(dir.resolve("raw.bin"), total));
            Files.delete(dir.resolve("raw.bin"));
            List<double[]> runs = run(dir, tensors, rows);
            double[] medians = new double[runs.get(0).length];
            for (int i = 0; i < medians.length; i++) {
                double[] column = new double[runs.size()];
                for (int r = 0; r < runs.size(); r++) {
                    column[r] = runs.get(r)[i];
                }
                Arrays.sort(column);
                medians[i] = column[column.length / 2];
            }
            double gb = total / 1e9;
            System.out.printf("raw sequential write, 1 stream, fsync   %7.2f GB/s%n", gb / rawWrite);
            System.out.printf("raw write, %d parallel streams, fsync    %7.2f GB/s%n", RANKS, gb / rawWrite4);
            System.out.printf("raw sequential read (page cache)        %7.2f GB/s%n", gb / rawRead);
            String[] names = {
                "save (sync, fsync)",
                "saveAsync: blocking part (host copy)",
                "saveAsync: until finish()",
                "load, same layout, CRC verified",
                "load, same layout, no CRC",
                "load, resharded (split dim 1), CRC",
            };
            double[] baseline = {rawWrite, rawWrite, rawWrite, rawRead, rawRead, rawRead};
            for (int i = 0; i < names.length; i++) {
                System.out.printf("%-40s%7.2f GB/s  (%.2f s)  ratio to raw %s %.2f%n", names[i], gb / medians[i], medians[i],
                        i < 3 ? "write" : "read", baseline[i] / medians[i]);
            }
        } finally {
            DurableFiles.deleteTree(dir);
        }
    }

    /** One world, {@code REPEATS} rounds; each round's timings in seconds, in the order printed. */
    private static List<double[]> run(Path dir, int tensors, long rows) {
        List<List<double[]>> perRank = InJvmWorld.run(RANKS, Duration.ofMinutes(10), rank -> {
            Communicator world = rank.groups(ParallelDims.of(RANKS, RANKS, 1)).world();
            NDManager m = rank.manager();
            int r = rank.rank();
            long[] global = {rows, COLUMNS};
            long local = rows / RANKS;
            List<ShardedTensor> state = new ArrayList<>();
            List<ShardedTensor> sameLayout = new ArrayList<>();
            List<ShardedTensor> resharded = new ArrayList<>();
            for (int t = 0; t < tensors; t++) {
                String key = "decoder.layers." + t + ".weight";
                NDArray values = m.randomUniform(-1f, 1f, new Shape(local, COLUMNS));
                state.add(new ShardedTensor(key, values, global, new long[] {local * r, 0}, 0));
                sameLayout.add(new ShardedTensor(key, m.zeros(new Shape(local, COLUMNS)), global,
                        new long[] {local * r, 0}, 0));
                resharded.add(new ShardedTensor(key, m.zeros(new Shape(rows, COLUMNS / RANKS)), global,
                        new long[] {0, COLUMNS / RANKS * r}, 0));
            }
            List<double[]> rounds = new ArrayList<>();
            for (int round = 0; round < REPEATS; round++) {
                long index = round;
                Path sync = dir.resolve("sync" + round);
                Path async = dir.resolve("async" + round);
                double[] t = new double[6];
                t[0] = timed(world, () -> DistCheckpointing.save(sync, state, Map.of("round", index), world));
                AsyncSave[] pending = new AsyncSave[1];
                long start = startTimer(world);
                pending[0] = DistCheckpointing.saveAsync(async, state, Map.of("round", index), world);
                world.barrier();
                t[1] = (System.nanoTime() - start) / 1e9;
                pending[0].finish();
                world.barrier();
                t[2] = (System.nanoTime() - start) / 1e9;
                t[3] = timed(world, () -> DistCheckpointing.load(sync, sameLayout, world, StrictMode.RAISE_ALL));
                t[4] = timed(world, () -> DistCheckpointing.load(async, sameLayout, world, StrictMode.RAISE_ALL,
                        LoadOptions.defaults().withVerifyChecksums(false)));
                t[5] = timed(world, () -> DistCheckpointing.load(sync, resharded, world, StrictMode.RAISE_ALL));
                rounds.add(t);
                if (r == 0) {
                    DurableFiles.deleteTree(sync);
                    DurableFiles.deleteTree(async);
                    System.out.printf("round %d: %s%n", round, Arrays.toString(t));
                }
                world.barrier();
            }
            return rounds;
        });
        return perRank.get(0);
    }

    private static long startTimer(Communicator world) {
        world.barrier();
        return System.nanoTime();
    }

    private static double timed(Communicator world, Runnable body) {
        long start = startTimer(world);
        body.run();
        world.barrier();
        return (System.nanoTime() - start) / 1e9;
    }

    private interface IoTask {
        double run() throws IOException;
    }

    private static double median(IoTask task) throws IOException {
        double[] t = new double[REPEATS];
        for (int i = 0; i < REPEATS; i++) {
            t[i] = task.run();
        }
        Arrays.sort(t);
        return t[REPEATS / 2];
    }

    /** Writes {@code total} bytes in {@code streams} parallel files (one if 1), 8 MiB writes, fsync; seconds. */
    private static double rawWrite(Path file, long total, int streams) throws IOException {
        ByteBuffer chunk = ByteBuffer.allocateDirect(8 << 20);
        for (int i = 0; i < chunk.capacity(); i += 4) {
            chunk.putFloat(i, (float) Math.sin(i));
        }
        List<Thread> threads = new ArrayList<>();
        List<IOException> failures = new ArrayList<>();
        long start = System.nanoTime();
        for (int s = 0; s < streams; s++) {
            Path target = streams == 1 ? file : file.resolveSibling(file.getFileName() + "." + s);
            long share = total / streams;
            Thread t = new Thread(() -> {
                try (FileChannel ch = FileChannel.open(target, StandardOpenOption.CREATE, StandardOpenOption.WRITE,
                        StandardOpenOption.TRUNCATE_EXISTING)) {
                    for (long written = 0; written < share; ) {
                        ByteBuffer b = chunk.duplicate();
                        b.limit((int) Math.min(b.capacity(), share - written));
                        while (b.hasRemaining()) {
                            written += ch.write(b);
                        }
                    }
                    ch.force(true);
                } catch (IOException e) {
                    synchronized (failures) {
                        failures.add(e);
                    }
                }
            });
            t.start();
            threads.add(t);
        }
        for (Thread t : threads) {
            try {
                t.join();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new IOException(e);
            }
        }
        double seconds = (System.nanoTime() - start) / 1e9;
        if (!failures.isEmpty()) {
            throw failures.get(0);
        }
        for (int s = 0; streams > 1 && s < streams; s++) {
            Files.deleteIfExists(file.resolveSibling(file.getFileName() + "." + s));
        }
        return seconds;
    }

    /** Reads {@code file} sequentially in 8 MiB reads; seconds. */
    private static double rawRead(Path file, long total) throws IOException {
        ByteBuffer chunk = ByteBuffer.allocateDirect(8 << 20);
        long start = System.nanoTime();
        long read = 0;
        try (FileChannel ch = FileChannel.open(file, StandardOpenOption.READ)) {
            while (read < total) {
                chunk.clear();
                int n = ch.read(chunk, read);
                if (n < 0) {
                    break;
                }
                read += n;
            }
        }
        return (System.nanoTime() - start) / 1e9;
    }
}
