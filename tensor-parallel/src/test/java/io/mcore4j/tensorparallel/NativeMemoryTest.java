package io.mcore4j.tensorparallel;

import static org.junit.jupiter.api.Assertions.assertEquals;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import ai.djl.nn.Activation;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.core.testing.NativeArrays;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.util.List;

import org.junit.jupiter.api.Test;

/** Acceptance 7: repeated training steps release every tensor they create. */
class NativeMemoryTest {

    @Test
    void hundredStepsOfTheTp2MlpKeepTheLiveArrayCountConstant() {
        List<int[]> counts = InJvmWorld.run(2, ctx -> {
            Communicator tp = ctx.groups(ParallelDims.of(2, 2, 1)).tp();
            NDManager root = ctx.manager();
            NDManager params = root.newSubManager();
            ColumnParallelLinear fc1 = ColumnParallelLinear.builder(16, 32, tp).sequenceParallel(true).manager(params).build();
            RowParallelLinear fc2 = RowParallelLinear.builder(32, 16, tp).sequenceParallel(true).manager(params).build();
            VocabParallelEmbedding embedding = VocabParallelEmbedding.builder(32, 16, tp).sequenceParallel(true)
                    .manager(params).build();
            ColumnParallelLinear output = ColumnParallelLinear.builder(16, 32, tp).bias(false).sequenceParallel(true)
                    .skipWeightAllocation(true).manager(params).build();
            NDArray ids = root.arange(0, 16, 1, DataType.INT64).mul(3).mod(32).reshape(8, 2);
            NDArray target = root.arange(0, 16, 1, DataType.INT64).mul(5).mod(32).reshape(8, 2);
            int afterFirst = 0;
            for (int step = 1; step <= 100; step++) {
                try (AutogradScope scope = AutogradScope.open(root)) {
                    NDArray h = embedding.forward(scope, ids);
                    NDArray y = fc2.forward(scope, Activation.gelu(fc1.forward(scope, h).output())).output();
                    NDArray logits = output.forward(scope, h.add(y), embedding.weight()).output();
                    NDArray loss = VocabParallelCrossEntropy.lossPerToken(scope, tp, logits, target, 0.1).mean();
                    scope.backward(loss);
                    // what an optimizer reads: every gradient, through handles owned by the scope
                    for (Parameter p : List.of(fc1.weight(), fc1.bias(), fc2.weight(), fc2.bias(), embedding.weight())) {
                        p.gradient(scope.manager()).sum();
                    }
                    fc1.shardedState("fc1.");
                }
                for (Parameter p : List.of(fc1.weight(), fc1.bias(), fc2.weight(), fc2.bias(), embedding.weight())) {
                    p.zeroGradient();
                }
                if (step == 1) {
                    afterFirst = NativeArrays.live(root);
                }
            }
            int afterLast = NativeArrays.live(root);
            for (AutoCloseable layer : List.of(fc1, fc2, embedding, output)) {
                layer.close();
            }
            params.close();
            return new int[] {afterFirst, afterLast};
        });
        for (int r = 0; r < counts.size(); r++) {
            assertEquals(counts.get(r)[0], counts.get(r)[1], "rank " + r + " live arrays after step 1 vs step 100");
        }
    }

    @Test
    void theSerialPathAtTp1LeavesNothingInTheCallersManager() {
        InJvmWorld.run(1, ctx -> {
            Communicator tp = ctx.groups(ParallelDims.of(1, 1, 1)).tp();
            NDManager root = ctx.manager();
            try (NDManager params = root.newSubManager(); NDManager inputs = root.newSubManager()) {
                ColumnParallelLinear fc1 = ColumnParallelLinear.builder(4, 8, tp).manager(params).build();
                RowParallelLinear fc2 = RowParallelLinear.builder(8, 4, tp).manager(params).build();
                NDArray x = inputs.ones(new Shape(2, 1, 4));
                x.setRequiresGradient(true);
                int before = NativeArrays.live(inputs) + NativeArrays.live(params);
                for (int step = 0; step < 3; step++) {
                    try (AutogradScope scope = AutogradScope.open(root)) {
                        NDArray y = fc2.forward(scope, fc1.forward(scope, x).output()).output();
                        scope.backward(y.sum());
                    }
                }
                // x.grad and the parameters' .grad live inside libtorch, not as DJL handles
                assertEquals(before, NativeArrays.live(inputs) + NativeArrays.live(params));
                fc1.close();
                fc2.close();
            }
            return null;
        });
    }
}
