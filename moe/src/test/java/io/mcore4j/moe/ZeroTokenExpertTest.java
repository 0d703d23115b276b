package io.mcore4j.moe;

import static io.mcore4j.moe.Fixtures.assertClose;
import static io.mcore4j.moe.Fixtures.grad;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.index.NDIndex;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.core.random.SeedScheme;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.ReduceOp;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * Acceptance 6: an expert that receives no token runs without error and its parameters' gradients
 * stay zero, while the layer still matches the single-rank layer. Every token's feature 0 is 5 and
 * only the last expert's router row reads it, with weight -20, so no token selects that expert; with EP4 its rank then
 * receives no rows at all (empty all-to-all splits), and with padding it receives only padding rows
 * of weight 0.
 */
class ZeroTokenExpertTest {
    static final int SEQ = 8;
    static final int BATCH = 2;
    static final int HIDDEN = 8;
    static final int UNUSED = 3;

    @ParameterizedTest(name = "world {0}: EP{1} expert-TP{2} {3} padded={4} grouped={5}")
    @CsvSource({
        "2, 2, 1, ALL_TO_ALL, false, false", "2, 2, 1, ALL_GATHER, false, false",
        "4, 4, 1, ALL_TO_ALL, false, false", "4, 4, 1, ALL_GATHER, false, false",
        "4, 2, 2, ALL_TO_ALL, false, false", "4, 4, 1, ALL_TO_ALL, true, false",
        "4, 4, 1, ALL_TO_ALL, false, true", "2, 1, 2, ALL_GATHER, false, true"})
    void anExpertWithoutTokensKeepsZeroGradients(int world, int ep, int etp, MoeConfig.Dispatcher dispatcher,
                                                 boolean padded, boolean grouped) {
        MoeConfig.Builder b = MoeConfig.builder(4, 2, 8).initStd(0.3).outputInitStd(0.2).dispatcher(dispatcher)
                .groupedGemm(grouped);
        if (padded) {
            b.capacityFactor(1.0).padToCapacity(true);
        }
        MoeConfig config = b.build();
        InJvmWorld.run(world, ctx -> {
            ProcessGroups groups = ctx.groups(ParallelDims.builder(world).expertParallel(ep).expertTensorParallel(etp)
                    .build());
            try (NDManager m = ctx.manager().newSubManager()) {
                MoeLayer layer = MoeLayer.build(config, HIDDEN, groups, m, new SeedScheme(8), "mlp.", new AuxLossScale());
                MoeLayer reference = MoeLayer.build(config, HIDDEN, Fixtures.soloGroups(), m, new SeedScheme(8), "mlp.",
                        new AuxLossScale());
                // feature 0 of every token is about 5; only the unused expert's router row reads it, with weight -20
                for (MoeLayer l : new MoeLayer[] {layer, reference}) {
                    NDArray w = l.router().weight().data().duplicate();
                    w.set(new NDIndex(":, 0"), 0f);
                    w.set(new NDIndex(UNUSED + ", 0"), -20f);
                    Tensors.copyInto(l.router().weight().data(), w);
                    w.close();
                }
                try (AutogradScope scope = AutogradScope.open(m)) {
                    NDManager s = scope.manager();
                    NDArray batch = Fixtures.normal(s, 600 + groups.dataParallelRank(), 1.0, SEQ, BATCH, HIDDEN);
                    batch.set(new NDIndex(":, :, 0"), 5f);
                    NDArray x = Fixtures.leaf(batch, s);
                    NDArray xr = Fixtures.leaf(batch, s);
                    NDArray y = layer.forward(scope, x);
                    NDArray yr = reference.forward(scope, xr);
                    NDArray g = Fixtures.normal(s, 700 + groups.dataParallelRank(), 1.0, SEQ, BATCH, HIDDEN);
                    scope.backward(new NDArray[] {y, yr}, new NDArray[] {g, g});
                    assertClose("rank " + ctx.rank() + " output", y, yr, 1e-5);
                    assertClose("rank " + ctx.rank() + " input gradient", grad(x, s), grad(xr, s), 1e-5);
                    for (int local = 0; local < layer.numLocalExperts(); local++) {
                        int e = layer.firstLocalExpert() + local;
                        for (Parameter p : layer.expertParameters(local)) {
                            NDArray gp = Tensors.gradientOrNull(p.data(), s);
                            double norm = gp == null ? 0 : Fixtures.maxAbs(gp);
                            NDArray total = groups.expertDp().allReduce(s.create(new float[] {(float) norm}), ReduceOp.MAX, s);
                            if (e == UNUSED) {
                                assertEquals(0.0, norm, "expert " + e + " " + p.name() + " received a gradient");
                            } else {
                                assertTrue(total.getFloat() > 0, "expert " + e + " " + p.name() + " must be trained");
                            }
                        }
                    }
                }
                layer.close();
                reference.close();
            }
            return null;
        });
    }
}
