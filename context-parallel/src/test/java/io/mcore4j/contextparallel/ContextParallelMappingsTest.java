package io.mcore4j.contextparallel;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import org.junit.jupiter.api.Test;

/** The key/value exchanges and their backward, on three context-parallel ranks. */
class ContextParallelMappingsTest {
    private static final int CP = 3;

    @Test
    void allGatherConcatenatesInRankOrderAndReduceScattersTheGradient() {
        InJvmWorld.run(CP, rank -> {
            ProcessGroups groups = rank.groups(ParallelDims.builder(CP).contextParallel(CP).build());
            int r = groups.cp().rank();
            try (AutogradScope scope = AutogradScope.open(rank.manager())) {
                NDArray x = scope.manager().create(new float[] {r, 10 + r}, new Shape(2, 1));
                x.setRequiresGradient(true);
                NDArray all = ContextParallelMappings.allGatherSequence(scope, groups.cp(), x);
                assertArrayEquals(new float[] {0, 10, 1, 11, 2, 12}, all.toFloatArray());
                // upstream gradient (rank + 1) everywhere: each row's gradient sums 1 + 2 + 3
                NDArray weights = scope.manager().full(all.getShape(), r + 1f);
                scope.backward(all.mul(weights).sum());
                assertArrayEquals(new float[] {6, 6}, Tensors.gradientOrZeros(x, scope.manager()).toFloatArray());
            }
            return null;
        });
    }

    @Test
    void ringShiftReceivesFromThePreviousRankAndSendsTheGradientBack() {
        InJvmWorld.run(CP, rank -> {
            ProcessGroups groups = rank.groups(ParallelDims.builder(CP).contextParallel(CP).build());
            int r = groups.cp().rank();
            try (AutogradScope scope = AutogradScope.open(rank.manager())) {
                NDArray x = scope.manager().create(new float[] {r}, new Shape(1));
                x.setRequiresGradient(true);
                NDArray shifted = ContextParallelMappings.ringShift(scope, groups.cp(), x);
                assertArrayEquals(new float[] {(r + CP - 1) % CP}, shifted.toFloatArray());
                // this rank weighs what it received by (rank + 1); that weight is the sender's gradient
                scope.backward(shifted.mul(r + 1f).sum());
                assertArrayEquals(new float[] {(r + 1) % CP + 1}, Tensors.gradientOrZeros(x, scope.manager()).toFloatArray());
            }
            return null;
        });
    }
}
