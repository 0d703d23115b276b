package io.mcore4j.parallel.tcp;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.ProcessGroup;
import io.mcore4j.parallel.ReduceOp;

import java.time.Duration;
import java.util.List;
import java.util.stream.IntStream;

/**
 * Prints the time of a float32 all-reduce and all-gather over the TCP backend, ranks as threads
 * over loopback. A benchmark, not a test: {@code java -cp <test classpath> io.mcore4j.parallel.tcp.TcpAllReduceBenchmark [ranks] [elements]}.
 */
public final class TcpAllReduceBenchmark {
    private TcpAllReduceBenchmark() {}

    public static void main(String[] args) {
        int world = args.length > 0 ? Integer.parseInt(args[0]) : 2;
        int elements = args.length > 1 ? Integer.parseInt(args[1]) : 1 << 20;
        int iterations = 20;
        List<String> lines = TcpThreads.values(TcpThreads.run(world, Duration.ofSeconds(60), (rank, backend, root) -> {
            Communicator c = backend.communicator(ProcessGroup.of("world", IntStream.range(0, world).toArray(), rank));
            NDArray x = root.ones(new Shape(elements));
            double reduce = time(iterations, () -> {
                try (NDManager m = root.newSubManager()) {
                    c.allReduce(x, ReduceOp.SUM, m);
                }
            });
            double gather = time(iterations, () -> {
                try (NDManager m = root.newSubManager()) {
                    c.allGather(x, 0, m);
                }
            });
            return String.format("rank %d: all-reduce %.2f ms, all-gather %.2f ms", rank, reduce, gather);
        }));
        double mib = elements * 4.0 / (1 << 20);
        System.out.printf("TCP backend, %d ranks as threads over loopback, float32 x %d (%.1f MiB), mean of %d:%n",
                world, elements, mib, iterations);
        lines.forEach(System.out::println);
    }

    private static double time(int iterations, Runnable body) {
        body.run();
        long start = System.nanoTime();
        for (int i = 0; i < iterations; i++) {
            body.run();
        }
        return (System.nanoTime() - start) / 1e6 / iterations;
    }
}
