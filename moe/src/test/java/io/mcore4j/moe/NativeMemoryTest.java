package io.mcore4j.moe;

import static org.junit.jupiter.api.Assertions.assertEquals;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.core.random.SeedScheme;
import io.mcore4j.core.testing.NativeArrays;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.util.List;

import io.mcore4j.tensorparallel.MlpActivation;
import org.junit.jupiter.api.Test;

/**
 * Repeated training steps release every tensor they create: two layers (all-to-all with expert
 * tensor parallelism, dropping, jitter, aux-loss-free bias, group-limited routing, top-k scaling and every
 * auxiliary loss; all-gather with padding, biases, a shared expert, grouped GEMMs and fused permutation) at EP2 x expert-TP2 over 30 steps, each step reading
 * every gradient, updating the expert bias, resetting the global tracker and describing the
 * checkpoint state. The live-array count after step 30 equals that after step 1.
 */
class NativeMemoryTest {

    @Test
    void repeatedStepsKeepTheLiveArrayCountConstant() {
        MoeConfig a2a = MoeConfig.builder(4, 2, 8).dispatcher(MoeConfig.Dispatcher.ALL_TO_ALL).capacityFactor(1.0)
                .inputJitter(0.01).routerScore(MoeConfig.RouterScore.SIGMOID).auxLossFree(true).auxLossCoeff(0.01)
                .seqAuxLossCoeff(0.01).globalAuxLossCoeff(0.01).zLossCoeff(0.001).routerInFp32(true)
                .groupLimitedRouting(2, 1).topKScalingFactor(2).sequenceParallel(true).build();
        MoeConfig allGather = MoeConfig.builder(4, 2, 8).activation(MlpActivation.SWIGLU).capacityFactor(1.0)
                .padToCapacity(true).addBias(true).sharedExpertFfnHiddenSize(8).auxLossCoeff(0.01).groupedGemm(true)
                .permuteFusion(true).build();
        List<int[]> counts = InJvmWorld.run(4, ctx -> {
            ProcessGroups groups = ctx.groups(ParallelDims.builder(4).tensorParallel(2).expertParallel(2)
                    .expertTensorParallel(2).build());
            NDManager root = ctx.manager();
            NDManager params = root.newSubManager();
            AuxLossScale scale = new AuxLossScale();
            MoeLayer first = MoeLayer.build(a2a, 8, groups, params, new SeedScheme(1), "layers.0.mlp.", scale);
            MoeLayer second = MoeLayer.build(allGather, 8, groups, params, new SeedScheme(1), "layers.1.mlp.", scale);
            NDArray input = Fixtures.normal(root, 10 + ctx.rank(), 1.0, 8, 2, 8);
            int afterFirst = 0;
            for (int step = 1; step <= 30; step++) {
                scale.set(1.0 / step);
                try (AutogradScope scope = AutogradScope.open(root)) {
                    NDArray x = Fixtures.leaf(input, scope.manager());
                    NDArray h = first.forward(scope, x.get("0:4")); // this rank's sequence chunk
                    NDArray y = second.forward(scope, groups.tp().allGather(h, 0, scope.manager()).add(x));
                    scope.backward(y.sum());
                    for (MoeLayer layer : List.of(first, second)) {
                        for (Parameter p : layer.parameters()) {
                            NDArray g = p.gradient(scope.manager());
                            if (g != null) {
                                g.sum();
                            }
                        }
                        layer.shardedState("layers.");
                    }
                }
                for (MoeLayer layer : List.of(first, second)) {
                    layer.updateExpertBias();
                    layer.resetGlobalAuxLossTracker();
                    for (Parameter p : layer.parameters()) {
                        p.zeroGradient();
                    }
                }
                if (step == 1) {
                    afterFirst = NativeArrays.live(root);
                }
            }
            int afterLast = NativeArrays.live(root);
            first.close();
            second.close();
            params.close();
            return new int[] {afterFirst, afterLast};
        });
        for (int r = 0; r < counts.size(); r++) {
            assertEquals(counts.get(r)[0], counts.get(r)[1], "rank " + r + " live arrays after step 1 vs step 30");
        }
    }
}
