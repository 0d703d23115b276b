package io.mcore4j.moe;

import static io.mcore4j.moe.Fixtures.assertClose;
import static io.mcore4j.moe.Fixtures.grad;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.core.random.SeedScheme;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.ReduceOp;
import io.mcore4j.parallel.inprocess.InJvmWorld;
import io.mcore4j.tensorparallel.MlpActivation;
import io.mcore4j.tensorparallel.StridedPartition;

import java.util.List;

import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * Acceptance 4: a MoE layer under expert (and tensor) parallelism equals the single-rank layer with
 * the same global weights.
 *
 * <p><b>How the comparison works.</b> Data-parallel rank {@code d} owns a known micro-batch
 * {@code X_d} (drawn from seed {@code 100 + d}) and upstream gradient {@code G_d}. Every rank also
 * builds the EP1/TP1 layer on a private one-rank world (same seeds and keys, hence the same global
 * weights) and runs it on the whole {@code X_d}. Then, per rank:
 * <ul>
 *   <li>output and input gradient equal the reference's, or their sequence chunk with sequence
 *       parallelism;</li>
 *   <li>the router weight's gradient summed over the TP group equals the reference's for
 *       {@code X_d} (each TP rank routes its chunk of the tokens; the optimizer sums this
 *       sequence-parallel gradient over TP);</li>
 *   <li>an expert's gradient here covers the tokens of every rank in its expert-TP x EP box that
 *       routed to it; summed over the expert-DP group (the ranks holding the same expert shard, whose
 *       gradients the optimizer averages) it covers every token of every DP slice. So it must equal
 *       {@code Σ_d} of the reference gradients (computed by an all-reduce over the world of the
 *       references on TP rank 0, one per slice), cut to this rank's expert-TP shard.</li>
 * </ul>
 */
class ExpertParallelTest {
    static final int SEQ = 8;
    static final int BATCH = 2;
    static final int HIDDEN = 8;

    @ParameterizedTest(name = "world {0}: TP{1} EP{2} expert-TP{3} SP={4} {5} {6}")
    @CsvSource({
        "2, 1, 2, 1, false, ALL_TO_ALL, gelu",
        "2, 1, 2, 1, false, ALL_GATHER, swiglu-aux",
        "4, 1, 4, 1, false, ALL_TO_ALL, swiglu-aux",
        "4, 1, 4, 1, false, ALL_GATHER, padded",
        "4, 2, 2, 1, true, ALL_TO_ALL, swiglu-aux",
        "4, 2, 2, 1, false, ALL_GATHER, gelu-shared",
        "4, 2, 2, 2, true, ALL_GATHER, swiglu-bias",
        "4, 1, 2, 2, false, ALL_TO_ALL, padded",
        "2, 1, 1, 2, false, ALL_TO_ALL, swiglu-bias",
        "2, 2, 1, 2, true, ALL_GATHER, swiglu-aux",
        "4, 2, 2, 2, false, ALL_TO_ALL, grouped-fused-swiglu-bias",
        "4, 1, 4, 1, false, ALL_GATHER, fused-aux",
        "4, 1, 4, 1, false, ALL_TO_ALL, fused-aux",
        "4, 2, 2, 1, true, ALL_TO_ALL, fused-shared",
        "2, 1, 2, 1, false, ALL_TO_ALL, fused-shared-overlap",
        "4, 2, 2, 1, true, ALL_TO_ALL, fused-shared-overlap"})
    void expertParallelLayerEqualsTheSingleRankLayer(int world, int tp, int ep, int etp, boolean sp,
                                                     MoeConfig.Dispatcher dispatcher, String variant) {
        MoeConfig.Builder b = MoeConfig.builder(4, 2, 8).initStd(0.3).outputInitStd(0.2).dispatcher(dispatcher)
                .sequenceParallel(sp);
        switch (variant) {
            case "swiglu-aux" -> b.activation(MlpActivation.SWIGLU).auxLossCoeff(0.1).seqAuxLossCoeff(0.05)
                    .zLossCoeff(0.01);
            case "swiglu-bias" -> b.activation(MlpActivation.SWIGLU).addBias(true).sharedExpertFfnHiddenSize(8);
            case "padded" -> b.capacityFactor(1.0).padToCapacity(true).auxLossCoeff(0.1);
            case "gelu-shared" -> b.sharedExpertFfnHiddenSize(8).addBias(true);
            case "grouped-fused-swiglu-bias" -> b.activation(MlpActivation.SWIGLU).addBias(true).groupedGemm(true)
                    .permuteFusion(true);
            case "fused-aux" -> b.permuteFusion(true).auxLossCoeff(0.1);
            // the shared expert's forward queued while the host waits for the counts
            case "fused-shared" -> b.permuteFusion(true).sharedExpertFfnHiddenSize(8);
            // the shared expert's forward between the start of the dispatch's all-to-all and its arrival
            case "fused-shared-overlap" -> b.permuteFusion(true).sharedExpertFfnHiddenSize(8).sharedExpertOverlap(true);
            default -> { }
        }
        MoeConfig config = b.build();
        ParallelDims dims = ParallelDims.builder(world).tensorParallel(tp).expertParallel(ep).expertTensorParallel(etp)
                .build();
        InJvmWorld.run(world, ctx -> {
            ProcessGroups groups = ctx.groups(dims);
            ProcessGroups solo = Fixtures.soloGroups();
            try (NDManager m = ctx.manager().newSubManager()) {
                AuxLossScale scale = new AuxLossScale(0.5);
                MoeLayer layer = MoeLayer.build(config, HIDDEN, groups, m, new SeedScheme(9), "decoder.layers.1.mlp.", scale);
                MoeLayer reference = MoeLayer.build(config, HIDDEN, solo, m, new SeedScheme(9), "decoder.layers.1.mlp.",
                        scale);
                try (AutogradScope scope = AutogradScope.open(m)) {
                    NDManager s = scope.manager();
                    int d = groups.dataParallelRank();
                    int tpRank = groups.tensorParallelRank();
                    NDArray xFull = Fixtures.normal(s, 100 + d, 1.0, SEQ, BATCH, HIDDEN);
                    NDArray gFull = Fixtures.normal(s, 200 + d, 1.0, SEQ, BATCH, HIDDEN);
                    NDArray x = Fixtures.leaf(sp ? Fixtures.chunk(xFull, tp, tpRank, s) : xFull, s);
                    NDArray g = sp ? Fixtures.chunk(gFull, tp, tpRank, s) : gFull;
                    NDArray xr = Fixtures.leaf(xFull, s);
                    NDArray y = layer.forward(scope, x);
                    NDArray yr = reference.forward(scope, xr);
                    scope.backward(new NDArray[] {y, yr}, new NDArray[] {g, gFull});

                    String at = "rank " + ctx.rank() + ": ";
                    assertClose(at + "output", y, sp ? Fixtures.chunk(yr, tp, tpRank, s) : yr, 1e-5);
                    NDArray dxr = grad(xr, s);
                    assertClose(at + "input gradient", grad(x, s), sp ? Fixtures.chunk(dxr, tp, tpRank, s) : dxr, 1e-5);
                    assertClose(at + "router gradient summed over TP",
                            sum(groups.tp(), grad(layer.router().weight().data(), s), s),
                            grad(reference.router().weight().data(), s), 1e-5);
                    compareExperts(at, config, groups, layer, reference, s);
                    compareShared(at, config, groups, layer, reference, s);
                }
                layer.close();
                reference.close();
            }
            return null;
        });
    }

    /** Expert gradients summed over expert-DP against the sum over DP slices of the reference's. */
    private static void compareExperts(String at, MoeConfig config, ProcessGroups groups, MoeLayer layer,
                                       MoeLayer reference, NDManager s) {
        Communicator etp = groups.expertTp();
        boolean glu = config.activation() == MlpActivation.SWIGLU;
        boolean firstOfSlice = groups.tensorParallelRank() == 0;
        // every rank walks every global expert so the world all-reduces match
        for (int e = 0; e < config.numExperts(); e++) {
            List<Parameter> ref = reference.expertParameters(e);
            for (int i = 0; i < ref.size(); i++) {
                NDArray mine = Fixtures.gradOrZeros(ref.get(i).data(), s);
                NDArray contribution = firstOfSlice ? mine : mine.zerosLike();
                contribution.attach(s);
                NDArray overSlices = groups.world().allReduce(contribution, ReduceOp.SUM, s);
                int local = e - layer.firstLocalExpert();
                if (local < 0 || local >= layer.numLocalExperts()) {
                    continue;
                }
                Parameter p = layer.expertParameters(local).get(i);
                NDArray expected = shard(p.name(), overSlices, etp, glu, s);
                NDArray actual = sum(groups.expertDp(), Fixtures.gradOrZeros(p.data(), s), s);
                assertClose(at + "expert " + e + " " + p.name() + " gradient summed over expert-DP", actual, expected, 1e-5);
            }
        }
    }

    /**
     * The shared expert is an ordinary TP MLP over the dense groups: its gradients summed over DP
     * (and over TP for sequence-parallel ones) equal the sum over DP slices of the reference's, cut
     * to this rank's TP shard (fc1 rows, strided for SwiGLU; fc2 columns).
     */
    private static void compareShared(String at, MoeConfig config, ProcessGroups groups, MoeLayer layer,
                                      MoeLayer reference, NDManager s) {
        if (config.sharedExpertFfnHiddenSize() == 0) {
            return;
        }
        List<Parameter> mine = layer.parameters();
        List<Parameter> ref = reference.parameters();
        int count = config.addBias() ? 4 : 2;
        Communicator tp = groups.tp();
        int stride = config.activation() == MlpActivation.SWIGLU ? 2 : 1;
        for (int j = 0; j < count; j++) {
            Parameter p = mine.get(mine.size() - count + j);
            NDArray g = Fixtures.gradOrZeros(ref.get(ref.size() - count + j).data(), s);
            NDArray contribution = groups.tensorParallelRank() == 0 ? g : g.zerosLike();
            contribution.attach(s);
            NDArray expected = groups.world().allReduce(contribution, ReduceOp.SUM, s);
            if (p.partition().isSplit()) {
                boolean fc1 = j < count / 2;
                expected = new StridedPartition(p.partition().dim(), tp.rank(), tp.size(), fc1 ? stride : 1)
                        .slice(expected, s);
            }
            NDArray actual = Fixtures.gradOrZeros(p.data(), s);
            if (p.kind() == Parameter.Kind.SEQUENCE_PARALLEL) {
                actual = sum(tp, actual, s);
            }
            actual = sum(groups.dp(), actual, s);
            assertClose(at + "shared expert " + p.name() + " (" + j + ") gradient", actual, expected, 1e-5);
        }
    }

    /** This rank's expert-TP shard of a full expert tensor, cut the way {@link LocalExperts} cuts it. */
    static NDArray shard(String name, NDArray full, Communicator etp, boolean glu, NDManager owner) {
        if (etp.size() == 1 || name.endsWith("linear_fc2.bias")) {
            return full;
        }
        boolean fc1 = name.contains("linear_fc1");
        StridedPartition partition = fc1 ? new StridedPartition(0, etp.rank(), etp.size(), glu ? 2 : 1)
                : new StridedPartition(1, etp.rank(), etp.size(), 1);
        return partition.slice(full, owner);
    }

    static NDArray sum(Communicator group, NDArray x, NDManager owner) {
        return group.size() == 1 ? x : group.allReduce(x, ReduceOp.SUM, owner);
    }
}
