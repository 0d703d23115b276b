package io.mcore4j.checkpoint;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.shard.ShardedTensor;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.nio.file.Path;
import java.util.List;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** Sources and targets that are not plain contiguous leaves: transposed views, parameters that require grad, other dtypes. */
class TensorKindsTest {
    @TempDir
    Path dir;

    @Test
    void transposedSourcesAndGradientTrackingTargetsRoundTrip() {
        long[] shape = {6, 4};
        InJvmWorld.run(1, rank -> {
            NDManager m = rank.manager();
            var world = rank.groups(ParallelDims.of(1, 1, 1)).world();
            // the stored values of "t" are the transpose of a [4, 6] block: a non-contiguous view
            NDArray base = m.create(Blocks.block("base", new long[] {4, 6}, new long[2], new long[] {4, 6}), new Shape(4, 6));
            NDArray transposed = base.transpose();
            NDArray bools = m.create(new boolean[] {true, false, false, true, true, false}, new Shape(2, 3));
            NDArray ints = m.create(new int[] {7, -8, 9, Integer.MIN_VALUE}, new Shape(4));
            NDArray doubles = m.create(new double[] {Math.PI, -0.0, Double.MIN_VALUE}, new Shape(3));
            DistCheckpointing.save(dir, List.of(new ShardedTensor("t", transposed, shape, new long[2], 0),
                    ShardedTensor.whole("bools", bools), ShardedTensor.whole("ints", ints),
                    ShardedTensor.whole("doubles", doubles)), null, world);

            NDArray param = m.zeros(new Shape(shape));
            param.setRequiresGradient(true);
            List<ShardedTensor> targets = List.of(new ShardedTensor("t", param, shape, new long[2], 0),
                    ShardedTensor.whole("bools", m.zeros(new Shape(2, 3), DataType.BOOLEAN)),
                    ShardedTensor.whole("ints", m.zeros(new Shape(4), DataType.INT32)),
                    ShardedTensor.whole("doubles", m.zeros(new Shape(3), DataType.FLOAT64)));
            DistCheckpointing.load(dir, targets, world, StrictMode.RAISE_ALL);

            assertSame(param, targets.get(0).data());
            assertTrue(Tensors.requiresGrad(param), "loading keeps the parameter a leaf that requires grad");
            assertArrayEquals(transposed.toFloatArray(), param.toFloatArray());
            assertArrayEquals(bools.toBooleanArray(), targets.get(1).data().toBooleanArray());
            assertArrayEquals(ints.toIntArray(), targets.get(2).data().toIntArray());
            assertArrayEquals(doubles.toDoubleArray(), targets.get(3).data().toDoubleArray());
            return null;
        });
    }
}
