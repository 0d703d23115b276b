package io.mcore4j.moe;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.core.random.SeedScheme;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.util.Arrays;
import java.util.List;

/**
 * Prints the time of one forward + backward step of a MoE layer on CPU, in-JVM ranks, for both
 * dispatchers, dropless and padded to capacity (batched experts). A benchmark, not a test:
 * {@code java -cp <test classpath> io.mcore4j.moe.MoeLayerBenchmark [world] [ep] [tokensPerRank] [hidden]}.
 */
public final class MoeLayerBenchmark {
    private MoeLayerBenchmark() {}

    public static void main(String[] args) {
        int world = args.length > 0 ? Integer.parseInt(args[0]) : 4;
        int ep = args.length > 1 ? Integer.parseInt(args[1]) : 4;
        int tokens = args.length > 2 ? Integer.parseInt(args[2]) : 512;
        int hidden = args.length > 3 ? Integer.parseInt(args[3]) : 256;
        int seq = tokens / 2;
        for (MoeConfig.Dispatcher d : MoeConfig.Dispatcher.values()) {
            for (boolean padded : new boolean[] {false, true}) {
                MoeConfig.Builder b = MoeConfig.builder(8, 2, 2 * hidden).dispatcher(d).auxLossCoeff(0.01);
                if (padded) {
                    b.capacityFactor(1.0).padToCapacity(true);
                }
                MoeConfig config = b.build();
                List<double[]> times = InJvmWorld.run(world, ctx -> {
                    ProcessGroups groups = ctx.groups(ParallelDims.builder(world).expertParallel(ep).build());
                    try (NDManager m = ctx.manager().newSubManager();
                         MoeLayer layer = MoeLayer.build(config, hidden, groups, m, new SeedScheme(1), "mlp.",
                                 new AuxLossScale())) {
                        NDArray input = Fixtures.normal(m, ctx.rank(), 1.0, seq, 2, hidden);
                        double[] ms = new double[20];
                        for (int step = -5; step < ms.length; step++) {
                            long start = System.nanoTime();
                            try (AutogradScope scope = AutogradScope.open(m)) {
                                NDArray x = Fixtures.leaf(input, scope.manager());
                                scope.backward(layer.forward(scope, x).sum());
                            }
                            for (Parameter p : layer.parameters()) {
                                p.zeroGradient();
                            }
                            if (step >= 0) {
                                ms[step] = (System.nanoTime() - start) / 1e6;
                            }
                        }
                        return ms;
                    }
                });
                double[] rank0 = times.get(0).clone();
                Arrays.sort(rank0);
                System.out.printf("world %d EP%d tokens/rank %d hidden %d experts 8 top-2 %-10s %-8s median %.2f ms/step%n",
                        world, ep, tokens, hidden, d, padded ? "padded" : "dropless", rank0[rank0.length / 2]);
            }
        }
    }
}
