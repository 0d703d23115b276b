package io.mcore4j.checkpoint;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.shard.ShardedTensor;

import java.util.Arrays;

/**
 * Test data: every global tensor has deterministic pseudo-random values derived from its key, so
 * any rank can build any block of it and a loaded block can be compared bit for bit with the block
 * cut from the same global values.
 */
final class Blocks {
    private Blocks() {}

    /** Value of element {@code i} (row-major) of the global tensor {@code key}: small signed floats, some with long mantissas. */
    static float value(String key, long i) {
        long z = key.hashCode() * 0x9E3779B97F4A7C15L + i * 0xBF58476D1CE4E5B9L;
        z = (z ^ (z >>> 31)) * 0x94D049BB133111EBL;
        z ^= z >>> 29;
        return ((z >>> 40) / (float) (1 << 24) - 0.5f) * 8f;
    }

    /** The block {@code [offset, offset + shape)} of global tensor {@code key}, row-major. */
    static float[] block(String key, long[] globalShape, long[] offset, long[] shape) {
        int n = 1;
        for (long s : shape) {
            n *= (int) s;
        }
        float[] out = new float[n];
        int dims = shape.length;
        long[] index = new long[dims];
        for (int e = 0; e < n; e++) {
            long flat = 0;
            for (int d = 0; d < dims; d++) {
                flat = flat * globalShape[d] + offset[d] + index[d];
            }
            out[e] = value(key, flat);
            for (int d = dims - 1; d >= 0; d--) {
                if (++index[d] < shape[d]) {
                    break;
                }
                index[d] = 0;
            }
        }
        return out;
    }

    /** An array with the values of a block, in {@code dtype} (converted from float32). */
    static NDArray create(NDManager m, String key, long[] globalShape, long[] offset, long[] shape, DataType dtype) {
        NDArray f = m.create(block(key, globalShape, offset, shape), new Shape(shape));
        if (dtype == DataType.FLOAT32) {
            return f;
        }
        NDArray converted = dtype == DataType.INT64 || dtype == DataType.INT32
                ? f.mul(1000).toType(dtype, false) : f.toType(dtype, false);
        f.close();
        return converted;
    }

    /** A shard holding real values. */
    static ShardedTensor shard(NDManager m, String key, long[] globalShape, long[] offset, long[] shape, int replica,
                               DataType dtype) {
        return new ShardedTensor(key, create(m, key, globalShape, offset, shape, dtype), globalShape, offset, replica);
    }

    static ShardedTensor shard(NDManager m, String key, long[] globalShape, long[] offset, long[] shape, int replica) {
        return shard(m, key, globalShape, offset, shape, replica, DataType.FLOAT32);
    }

    /** A load target of the given block, filled with a value no test data has (so an unfilled element shows). */
    static ShardedTensor target(NDManager m, String key, long[] globalShape, long[] offset, long[] shape, DataType dtype) {
        NDArray data = m.full(new Shape(shape), 1234.5f).toType(dtype, false);
        return new ShardedTensor(key, data, globalShape, offset, 0);
    }

    static ShardedTensor target(NDManager m, String key, long[] globalShape, long[] offset, long[] shape) {
        return target(m, key, globalShape, offset, shape, DataType.FLOAT32);
    }

    /** Fails unless the target's bytes equal those of the same block built from the global values. */
    static void assertHoldsOriginal(ShardedTensor t) {
        long[] shape = t.data().getShape().getShape();
        try (NDManager m = t.data().getManager().newSubManager()) {
            NDArray expected = create(m, t.key(), t.globalShape(), t.globalOffset(), shape, t.dtype());
            assertArrayEquals(expected.toByteArray(), t.data().toByteArray(), () -> t.key() + " block at "
                    + Arrays.toString(t.globalOffset()) + " of shape " + Arrays.toString(shape) + " differs");
        }
    }

    /** An offset array with {@code at} along {@code dim} and 0 elsewhere (helper for one-dim splits). */
    static long[] along(int dims, int dim, long at) {
        long[] o = new long[dims];
        o[dim] = at;
        return o;
    }
}
