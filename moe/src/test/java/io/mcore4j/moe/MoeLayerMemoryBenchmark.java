package io.mcore4j.moe;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.ResidentMemory;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.core.random.SeedScheme;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.util.List;
import java.util.Locale;
import java.util.concurrent.BrokenBarrierException;
import java.util.concurrent.CyclicBarrier;

/**
 * Prints the native memory a MoE layer keeps from its forward for its backward, on CPU with in-JVM ranks (EP = the
 * world, all-to-all dispatcher, fused permutation), against what backward must keep: the experts' input rows, fc1's
 * output (the activation's input), the activation's output (fc2's input) and the rows the combine weighs by the
 * probabilities. The layer runs in a frame, as a transformer layer runs it, so that what is left after the forward
 * is what the pass keeps. A benchmark, not a test: the figures come from Linux's resident set with glibc's mmap
 * threshold pinned (every tensor of 64 KiB or more a mapping of its own, unmapped when freed):
 * {@code MALLOC_MMAP_THRESHOLD_=65536 java -cp <test classpath> io.mcore4j.moe.MoeLayerMemoryBenchmark
 * [experts] [topK] [ffn] [hidden] [tokensPerRank] [world] [grouped]}.
 */
public final class MoeLayerMemoryBenchmark {
    private MoeLayerMemoryBenchmark() {}

    public static void main(String[] args) {
        int experts = args.length > 0 ? Integer.parseInt(args[0]) : 64;
        int topK = args.length > 1 ? Integer.parseInt(args[1]) : 8;
        int ffn = args.length > 2 ? Integer.parseInt(args[2]) : 256;
        int hidden = args.length > 3 ? Integer.parseInt(args[3]) : 256;
        int tokens = args.length > 4 ? Integer.parseInt(args[4]) : 1024;
        int world = args.length > 5 ? Integer.parseInt(args[5]) : 4;
        boolean grouped = args.length > 6 && Boolean.parseBoolean(args[6]);
        MoeConfig config = MoeConfig.builder(experts, topK, ffn).dispatcher(MoeConfig.Dispatcher.ALL_TO_ALL)
                .groupedGemm(grouped).permuteFusion(true).routerScore(MoeConfig.RouterScore.SIGMOID).auxLossFree(true)
                .build();
        CyclicBarrier barrier = new CyclicBarrier(world);
        long[] base = new long[1];
        List<long[]> results = InJvmWorld.run(world, ctx -> {
            ProcessGroups groups = ctx.groups(ParallelDims.builder(world).expertParallel(world).build());
            NDManager m = ctx.manager().newSubManager();
            MoeLayer layer = MoeLayer.build(config, hidden, groups, m, new SeedScheme(1), "layers.0.mlp.", new AuxLossScale());
            NDArray input = Fixtures.normal(m, ctx.rank(), 1.0, tokens / 2, 2, hidden);
            long[] out = new long[3]; // held after forward, peak in forward, peak over forward and backward
            for (int step = 0; step < 3; step++) {
                try (AutogradScope scope = AutogradScope.open(m)) {
                    NDArray x = Fixtures.leaf(input, scope.manager());
                    NDArray upstream = DataTypes.ones(scope.manager(), x.getShape(), DataType.FLOAT32, x.getDevice());
                    System.gc();
                    await(barrier);
                    if (ctx.rank() == 0) {
                        base[0] = ResidentMemory.resident();
                        ResidentMemory.resetPeak();
                    }
                    await(barrier);
                    NDArray y = scope.frame(x, r -> layer.forward(scope, r));
                    await(barrier);
                    if (ctx.rank() == 0) {
                        out[0] = ResidentMemory.resident() - base[0];
                        out[1] = ResidentMemory.peak() - base[0];
                    }
                    await(barrier);
                    scope.backward(new NDArray[] {y}, new NDArray[] {upstream});
                    await(barrier);
                    if (ctx.rank() == 0) {
                        out[2] = ResidentMemory.peak() - base[0];
                    }
                }
                for (Parameter p : layer.parameters()) {
                    p.zeroGradient();
                }
            }
            layer.close();
            return out;
        });
        long[] r = results.get(0);
        long rows = (long) tokens * topK * world; // routed rows of all ranks
        long must = rows * (2L * hidden + 2L * ffn) * 4; // expert input, fc1 output, activation output, combined rows
        double mib = 1 << 20;
        System.out.printf(Locale.ROOT, "%d experts top-%d ffn %d hidden %d, %d tokens per rank, EP%d, %s: kept after"
                        + " forward %.1f MiB (all ranks), must keep %.1f MiB; peak in forward %.1f MiB, over forward and"
                        + " backward %.1f MiB%n", experts, topK, ffn, hidden, tokens, world,
                grouped ? "grouped GEMM" : "per-expert GEMMs", r[0] / mib, must / mib, r[1] / mib, r[2] / mib);
    }

    private static void await(CyclicBarrier barrier) {
        try {
            barrier.await();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        } catch (BrokenBarrierException e) {
            throw new IllegalStateException(e);
        }
    }
}
