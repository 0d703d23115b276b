package io.mcore4j.contextparallel;

import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.random.DeterministicRandom;
import io.mcore4j.core.testing.NativeArrays;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * The fused ring attention (the shipped TorchScript kernels, run by this CPU libtorch) on in-JVM
 * context-parallel ranks against causal attention over the whole sequence composed of tensor ops in
 * float64: each rank's output and query, key and value gradients equal the serial ones at its
 * tokens of the load-balanced split, within 1e-5 relative, with and without grouped queries; and so does
 * {@code a2a+p2p}'s composition, the ring over the second hierarchical level between the all-to-alls over the
 * first ({@link ContextParallelMappings#scatterHeadsGatherSequence}), which hands the ring its load-balanced
 * chunks.
 */
class FusedRingAttentionTest {
    private static final int BATCH = 2;
    private static final int SEQ = 16;
    private static final int DIM = 8;
    private static final double TOLERANCE = 1e-5;

    @ParameterizedTest(name = "CP{0}, {1} heads, {2} groups")
    @CsvSource({"1, 4, 4", "2, 4, 4", "2, 4, 2", "4, 4, 4", "4, 4, 1", "4, 8, 2"})
    void matchesSerialAttention(int cp, int heads, int groups) {
        InJvmWorld.run(cp, rank -> {
            ProcessGroups pg = rank.groups(ParallelDims.builder(cp).contextParallel(cp).build());
            check(rank.manager(), pg.cp(), null, pg.cp(), heads, groups);
            return null;
        });
    }

    @ParameterizedTest(name = "CP4 as {0} x {1}, {2} heads, {3} groups")
    @CsvSource({"2, 2, 4, 2", "4, 1, 4, 4", "1, 4, 4, 2"})
    void hierarchicalLevelsMatchSerialAttention(int a2a, int p2p, int heads, int groups) {
        InJvmWorld.run(a2a * p2p, rank -> {
            ProcessGroups pg = rank.groups(ParallelDims.builder(a2a * p2p).contextParallel(a2a * p2p)
                    .hierarchicalContextParallelSizes(a2a, p2p).build());
            check(rank.manager(), pg.cp(), pg.hierarchicalCp().get(0), pg.hierarchicalCp().get(1), heads, groups);
            return null;
        });
    }

    /**
     * This rank's output and gradients against the serial ones at its tokens: the ring over {@code ringGroup},
     * between all-to-alls over {@code allToAll} unless it is null.
     */
    private static void check(NDManager m, Communicator cp, Communicator allToAll, Communicator ringGroup, int heads,
                              int groups) {
        DeterministicRandom random = new DeterministicRandom(11);
        NDArray q = random.normal(m, new Shape(BATCH, heads, SEQ, DIM), 0, 1, DataType.FLOAT32);
        NDArray k = random.normal(m, new Shape(BATCH, groups, SEQ, DIM), 0, 1, DataType.FLOAT32);
        NDArray v = random.normal(m, new Shape(BATCH, groups, SEQ, DIM), 0, 1, DataType.FLOAT32);
        NDArray weights = random.normal(m, new Shape(BATCH, heads, SEQ, DIM), 0, 1, DataType.FLOAT32);
        NDArray[] serial = serial(m, q, k, v, weights, heads / groups);
        ContextParallelSplit split = ContextParallelSplit.of(cp);
        FusedRingAttention ring = new FusedRingAttention(ringGroup, m);
        NDArray[] local = {split.split(q, 2, m), split.split(k, 2, m), split.split(v, 2, m)};
        NDArray[] got = new NDArray[4];
        try (AutogradScope scope = AutogradScope.open(m)) {
            for (NDArray x : local) {
                x.setRequiresGradient(true);
            }
            NDArray out;
            if (allToAll == null) {
                out = ring.forward(scope, local[0], local[1], local[2]);
            } else {
                NDArray attended = ring.forward(scope, gathered(scope, allToAll, local[0]), gathered(scope, allToAll, local[1]),
                        gathered(scope, allToAll, local[2]));
                out = headsFirst(ContextParallelMappings.scatterSequenceGatherHeads(scope, allToAll, sequenceFirst(attended)));
            }
            scope.backward(out.mul(split.split(weights, 2, scope.manager())).sum());
            got[0] = keep(out, m);
            for (int i = 0; i < 3; i++) {
                got[i + 1] = keep(Tensors.gradientOrZeros(local[i], m), m);
            }
        }
        String[] names = {"output", "query gradient", "key gradient", "value gradient"};
        for (int i = 0; i < 4; i++) {
            NDArray want = split.split(serial[i], 2, m);
            double d = NativeArrays.maxRelDiff(got[i], want);
            assertTrue(d <= TOLERANCE, names[i] + " on CP rank " + cp.rank() + " of " + cp.size() + ": relative difference " + d);
        }
    }

    /** [b, h, l, d] → the group's tokens in position order for its share of the heads [b, h/n, n·l, d]. */
    private static NDArray gathered(AutogradScope scope, Communicator group, NDArray x) {
        return headsFirst(ContextParallelMappings.scatterHeadsGatherSequence(scope, group, sequenceFirst(x)));
    }

    private static NDArray sequenceFirst(NDArray x) {
        return x.transpose(2, 0, 1, 3);
    }

    private static NDArray headsFirst(NDArray x) {
        return x.transpose(1, 2, 0, 3);
    }

    /** Causal attention over the whole sequence in float64 with autograd: {output, dq, dk, dv}. */
    private static NDArray[] serial(NDManager m, NDArray q32, NDArray k32, NDArray v32, NDArray weights, int perGroup) {
        try (AutogradScope scope = AutogradScope.open(m)) {
            NDManager sm = scope.manager();
            NDArray q = Tensors.own(q32.toType(DataType.FLOAT64, true), sm);
            NDArray k = Tensors.own(k32.toType(DataType.FLOAT64, true), sm);
            NDArray v = Tensors.own(v32.toType(DataType.FLOAT64, true), sm);
            for (NDArray x : new NDArray[] {q, k, v}) {
                x.setRequiresGradient(true);
            }
            NDArray keys = perGroup > 1 ? k.repeat(1, perGroup) : k;
            NDArray values = perGroup > 1 ? v.repeat(1, perGroup) : v;
            NDArray pos = sm.arange(0, SEQ, 1, DataType.INT64);
            NDArray future = pos.reshape(1, SEQ).gt(pos.reshape(SEQ, 1)).toType(DataType.FLOAT64, false).mul(-1e9);
            NDArray scores = q.matMul(keys.transpose(0, 1, 3, 2)).mul(1.0 / Math.sqrt(DIM)).add(future);
            NDArray out = scores.softmax(-1).matMul(values);
            scope.backward(out.mul(weights.toType(DataType.FLOAT64, false)).sum());
            return new NDArray[] {keep(out, m), keep(Tensors.gradientOrZeros(q, sm), m), keep(Tensors.gradientOrZeros(k, sm), m),
                    keep(Tensors.gradientOrZeros(v, sm), m)};
        }
    }

    private static NDArray keep(NDArray x, NDManager owner) {
        NDArray copy = x.toType(DataType.FLOAT64, true);
        copy.attach(owner);
        return copy;
    }
}
