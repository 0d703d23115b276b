package io.mcore4j.tensorparallel;

import static io.mcore4j.tensorparallel.Fixtures.assertClose;
import static io.mcore4j.tensorparallel.Fixtures.chunk;
import static io.mcore4j.tensorparallel.Fixtures.grad;
import static io.mcore4j.tensorparallel.Fixtures.leaf;
import static io.mcore4j.tensorparallel.Fixtures.pattern;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.util.List;

import org.junit.jupiter.api.Test;

class MappingsTest {

    /** Acceptance 1: the TP groups of a TP4 x PP2 layout reduce independently, forward and backward. */
    @Test
    void reduceForwardAndCopyBackwardSumWithinEachTensorParallelGroup() {
        List<float[]> results = InJvmWorld.run(8, ctx -> {
            ProcessGroups groups = ctx.groups(ParallelDims.of(8, 4, 2));
            Communicator tp = groups.tp();
            try (AutogradScope scope = AutogradScope.open(ctx.manager())) {
                NDManager m = scope.manager();
                NDArray x = leaf(m.create(new float[] {ctx.rank()}), m);
                NDArray y = leaf(m.create(new float[] {ctx.rank()}), m);
                NDArray reduced = Mappings.reduceFromTensorParallelRegion(scope, tp, x);
                NDArray copied = Mappings.copyToTensorParallelRegion(scope, tp, y);
                scope.backward(new NDArray[] {reduced, copied},
                        new NDArray[] {m.create(new float[] {1}), m.create(new float[] {ctx.rank()})});
                return new float[] {reduced.getFloat(), copied.getFloat(), grad(x, m).getFloat(), grad(y, m).getFloat()};
            }
        });
        for (int r = 0; r < 8; r++) {
            float expected = r < 4 ? 6 : 22;
            float[] got = results.get(r);
            assertEquals(expected, got[0], 0, "rank " + r + " reduce forward");
            assertEquals(r, got[1], 0, "rank " + r + " copy forward is the identity");
            assertEquals(1, got[2], 0, "rank " + r + " reduce backward is the identity");
            assertEquals(expected, got[3], 0, "rank " + r + " copy backward");
        }
    }

    /** Acceptance 2: scatter then gather along the last dim, and along dim 0, is the identity for values and gradients. */
    @Test
    void scatterThenGatherIsTheIdentityForValuesAndGradients() {
        InJvmWorld.run(4, ctx -> {
            Communicator tp = ctx.groups(ParallelDims.of(4, 4, 1)).tp();
            int r = tp.rank();
            try (AutogradScope scope = AutogradScope.open(ctx.manager())) {
                NDManager m = scope.manager();
                Shape shape = new Shape(8, 2, 12);
                NDArray full = pattern(m, shape, 0.5f, DataType.FLOAT32);
                // the round trip ends in a replicated region, whose gradient is the same on every rank
                NDArray upstream = pattern(m, shape, -1.25f, DataType.FLOAT32).add(3);
                NDArray xLast = leaf(full, m);
                NDArray xFirst = leaf(full, m);

                NDArray lastChunk = Mappings.scatterToTensorParallelRegion(scope, tp, xLast);
                assertEquals(new Shape(8, 2, 3), lastChunk.getShape());
                assertClose("own last-dim chunk", lastChunk, chunk(full, 2, 4, r, m), 0);
                NDArray lastBack = Mappings.gatherFromTensorParallelRegion(scope, tp, lastChunk);

                NDArray firstChunk = Mappings.scatterToSequenceParallelRegion(scope, tp, xFirst);
                assertEquals(new Shape(2, 2, 12), firstChunk.getShape());
                assertClose("own sequence chunk", firstChunk, chunk(full, 0, 4, r, m), 0);
                NDArray firstBack = Mappings.gatherFromSequenceParallelRegion(scope, tp, firstChunk, false);

                assertClose("last dim round trip", lastBack, full, 0);
                assertClose("dim 0 round trip", firstBack, full, 0);
                scope.backward(new NDArray[] {lastBack, firstBack}, new NDArray[] {upstream, upstream});
                assertClose("last dim round-trip gradient", grad(xLast, m), upstream, 0);
                assertClose("dim 0 round-trip gradient", grad(xFirst, m), upstream, 0);
            }
            return null;
        });
    }

    @Test
    void sequenceGatherBackwardReduceScattersOrKeepsTheOwnChunk() {
        InJvmWorld.run(2, ctx -> {
            Communicator tp = ctx.groups(ParallelDims.of(2, 2, 1)).tp();
            int r = tp.rank();
            try (AutogradScope scope = AutogradScope.open(ctx.manager())) {
                NDManager m = scope.manager();
                NDArray a = leaf(m.ones(new Shape(2, 3)), m);
                NDArray b = leaf(m.ones(new Shape(2, 3)), m);
                NDArray summed = Mappings.gatherFromSequenceParallelRegion(scope, tp, a, true);
                NDArray kept = Mappings.gatherFromSequenceParallelRegion(scope, tp, b, false);
                assertEquals(new Shape(4, 3), summed.getShape());
                // rank r's upstream gradient of row i is 10 * (r + 1) + i
                NDArray up = m.arange(0f, 4f).reshape(4, 1).add(10f * (r + 1)).repeat(1, 3);
                scope.backward(new NDArray[] {summed, kept}, new NDArray[] {up, up});
                float[] reduceScattered = grad(a, m).toFloatArray();
                float[] own = grad(b, m).toFloatArray();
                for (int i = 0; i < 2; i++) {
                    int row = 2 * r + i;
                    assertEquals(10 + row + 20 + row, reduceScattered[3 * i], 0, "reduce-scattered row " + row);
                    assertEquals(10 * (r + 1) + row, own[3 * i], 0, "own row " + row);
                }
            }
            return null;
        });
    }

    @Test
    void reduceScatterSumsAndKeepsTheOwnSequenceChunkWithAllGatherBackward() {
        InJvmWorld.run(2, ctx -> {
            Communicator tp = ctx.groups(ParallelDims.of(2, 2, 1)).tp();
            int r = tp.rank();
            try (AutogradScope scope = AutogradScope.open(ctx.manager())) {
                NDManager m = scope.manager();
                NDArray x = leaf(m.arange(0f, 4f).reshape(4, 1).mul(r + 1), m); // rank r: (r + 1) * i
                NDArray y = Mappings.reduceScatterToSequenceParallelRegion(scope, tp, x);
                assertEquals(new Shape(2, 1), y.getShape());
                float[] v = y.toFloatArray();
                for (int i = 0; i < 2; i++) {
                    assertEquals(3f * (2 * r + i), v[i], 0); // (1 + 2) * row
                }
                scope.backward(new NDArray[] {y}, new NDArray[] {m.create(new float[] {r + 1, r + 1}, new Shape(2, 1))});
                assertClose("all-gathered gradient", grad(x, m), m.create(new float[] {1, 1, 2, 2}, new Shape(4, 1)), 0);
            }
            return null;
        });
    }

    @Test
    void allToAllMovesBetweenSequenceAndHiddenSplitsAndBack() {
        InJvmWorld.run(4, ctx -> {
            Communicator tp = ctx.groups(ParallelDims.of(4, 4, 1)).tp();
            int r = tp.rank();
            try (AutogradScope scope = AutogradScope.open(ctx.manager())) {
                NDManager m = scope.manager();
                NDArray full = pattern(m, new Shape(8, 2, 8), 1f, DataType.FLOAT32).add(m.arange(0f, 8f).reshape(8, 1, 1));
                NDArray x = leaf(chunk(full, 0, 4, r, m), m);
                NDArray hidden = Mappings.allToAllSequenceToHidden(scope, tp, x);
                assertClose("sequence to hidden", hidden, chunk(full, 2, 4, r, m), 0);
                NDArray back = Mappings.allToAllHiddenToSequence(scope, tp, hidden);
                assertClose("hidden to sequence", back, chunk(full, 0, 4, r, m), 0);
                NDArray up = pattern(m, new Shape(2, 2, 8), 2f, DataType.FLOAT32).add(r);
                scope.backward(new NDArray[] {back}, new NDArray[] {up});
                assertClose("round-trip gradient", grad(x, m), up, 0);
            }
            return null;
        });
    }

    @Test
    void everyMappingIsANoOpForAGroupOfOne() {
        InJvmWorld.run(1, ctx -> {
            Communicator tp = ctx.groups(ParallelDims.of(1, 1, 1)).tp();
            try (AutogradScope scope = AutogradScope.open(ctx.manager())) {
                NDArray x = leaf(scope.manager().ones(new Shape(3, 2)), scope.manager());
                assertSame(x, Mappings.copyToTensorParallelRegion(scope, tp, x));
                assertSame(x, Mappings.reduceFromTensorParallelRegion(scope, tp, x));
                assertSame(x, Mappings.scatterToTensorParallelRegion(scope, tp, x));
                assertSame(x, Mappings.gatherFromTensorParallelRegion(scope, tp, x));
                assertSame(x, Mappings.scatterToSequenceParallelRegion(scope, tp, x));
                assertSame(x, Mappings.gatherFromSequenceParallelRegion(scope, tp, x, true));
                assertSame(x, Mappings.reduceScatterToSequenceParallelRegion(scope, tp, x));
                assertSame(x, Mappings.allToAllSequenceToHidden(scope, tp, x));
                assertSame(x, Mappings.allToAllHiddenToSequence(scope, tp, x));
                assertEquals(0, scope.recordedFunctions());
            }
            return null;
        });
    }

    @Test
    void unevenSplitsAreRefusedNamingTheSizes() {
        InJvmWorld.run(4, ctx -> {
            Communicator tp = ctx.groups(ParallelDims.of(4, 4, 1)).tp();
            try (AutogradScope scope = AutogradScope.open(ctx.manager())) {
                NDArray x = scope.manager().ones(new Shape(6, 1, 10));
                IllegalArgumentException seq = assertThrows(IllegalArgumentException.class,
                        () -> Mappings.scatterToSequenceParallelRegion(scope, tp, x));
                assertTrue(seq.getMessage().contains("sequence length 6") && seq.getMessage().contains("tensor parallel size 4"),
                        seq.getMessage());
                IllegalArgumentException last = assertThrows(IllegalArgumentException.class,
                        () -> Mappings.scatterToTensorParallelRegion(scope, tp, x));
                assertTrue(last.getMessage().contains("last dim 10") && last.getMessage().contains("tensor parallel size 4"),
                        last.getMessage());
                assertThrows(IllegalArgumentException.class, () -> Mappings.reduceScatterToSequenceParallelRegion(scope, tp, x));
            }
            return null;
        });
    }
}
