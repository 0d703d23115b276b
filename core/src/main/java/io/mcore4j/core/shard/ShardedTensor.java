package io.mcore4j.core.shard;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.types.DataType;
import io.mcore4j.core.DataTypes;

import java.util.Arrays;
import java.util.Objects;

/**
 * One rank's rectangular piece of a global tensor: the local data and where it sits.
 *
 * <p>The key names the global tensor and must not depend on the parallel layout (layers are keyed
 * by global layer index, experts by global expert index), so a checkpoint saved under one layout
 * loads under another. {@code globalOffset[d]} is where the local data starts along dim {@code d};
 * the local shape is the data's shape. {@code replicaId} is 0 for the main replica, the one rank
 * that writes this piece; any other value marks an identical copy held elsewhere (another TP rank
 * of a replicated weight, another DP rank) that is not written.
 *
 * @param key layout-independent name of the global tensor, e.g. {@code "decoder.layers.3.mlp.fc1.weight"}
 * @param data the local piece; not owned by this record
 * @param globalShape shape of the whole tensor
 * @param globalOffset start of the local piece along each dim
 * @param replicaId 0 for the main (writing) replica
 */
public record ShardedTensor(String key, NDArray data, long[] globalShape, long[] globalOffset, int replicaId) {

    /**
     * Validates that the piece lies inside the global shape.
     *
     * @throws IllegalArgumentException naming the key and the offending dim
     */
    public ShardedTensor {
        Objects.requireNonNull(key, "key");
        Objects.requireNonNull(data, "data");
        globalShape = globalShape.clone();
        globalOffset = globalOffset.clone();
        long[] local = data.getShape().getShape();
        if (globalShape.length != local.length || globalOffset.length != local.length) {
            throw new IllegalArgumentException(key + ": local shape " + Arrays.toString(local) + ", global shape "
                    + Arrays.toString(globalShape) + " and offset " + Arrays.toString(globalOffset)
                    + " must have the same number of dims");
        }
        for (int d = 0; d < local.length; d++) {
            if (globalOffset[d] < 0 || globalOffset[d] + local[d] > globalShape[d]) {
                throw new IllegalArgumentException(key + ": dim " + d + " local [" + globalOffset[d] + ", "
                        + (globalOffset[d] + local[d]) + ") lies outside the global size " + globalShape[d]);
            }
        }
        if (replicaId < 0) {
            throw new IllegalArgumentException(key + ": replica id " + replicaId + " is negative");
        }
    }

    /**
     * A piece that is the whole tensor, main replica.
     *
     * @param key the key
     * @param data the whole tensor
     * @return the description
     */
    public static ShardedTensor whole(String key, NDArray data) {
        long[] shape = data.getShape().getShape();
        return new ShardedTensor(key, data, shape, new long[shape.length], 0);
    }

    /**
     * The piece of a tensor split into {@code count} equal parts along {@code dim}, part {@code index}.
     *
     * @param key the key
     * @param data this rank's part
     * @param dim the split dim
     * @param index this rank's part index
     * @param count number of parts
     * @return the description, main replica
     */
    public static ShardedTensor partitioned(String key, NDArray data, int dim, int index, int count) {
        long[] shape = data.getShape().getShape();
        long[] global = shape.clone();
        long[] offset = new long[shape.length];
        global[dim] = shape[dim] * count;
        offset[dim] = shape[dim] * index;
        return new ShardedTensor(key, data, global, offset, 0);
    }

    /**
     * The same piece under {@code prefix + key}.
     *
     * @param prefix text prepended to the key, e.g. {@code "decoder.layers.3."}
     * @return a new description
     */
    public ShardedTensor withPrefix(String prefix) {
        return new ShardedTensor(prefix + key, data, globalShape, globalOffset, replicaId);
    }

    /**
     * The same piece marked as a non-main replica when {@code replicated} is true (for example on
     * data-parallel ranks other than 0); unchanged otherwise.
     *
     * @param replicated whether this copy is a duplicate of a piece written elsewhere
     * @return a new description, or this
     */
    public ShardedTensor replicatedIf(boolean replicated) {
        return replicated && replicaId == 0
                ? new ShardedTensor(key, data, globalShape, globalOffset, 1) : this;
    }

    /**
     * The same piece with one extra leading dim of size {@code count} at position {@code index},
     * used to store a stack of identical tensors (layers, experts) under one key.
     *
     * @param index this piece's position along the new leading dim
     * @param count the size of the new leading dim
     * @return a description whose data is reshaped to have a leading dim of 1
     */
    public ShardedTensor stacked(long index, long count) {
        long[] local = data.getShape().getShape();
        long[] newLocal = new long[local.length + 1];
        newLocal[0] = 1;
        System.arraycopy(local, 0, newLocal, 1, local.length);
        long[] shape = new long[globalShape.length + 1];
        shape[0] = count;
        System.arraycopy(globalShape, 0, shape, 1, globalShape.length);
        long[] offset = new long[globalOffset.length + 1];
        offset[0] = index;
        System.arraycopy(globalOffset, 0, offset, 1, globalOffset.length);
        return new ShardedTensor(key, data.reshape(newLocal), shape, offset, replicaId);
    }

    /**
     * Whether this is the replica that writes.
     *
     * @return true if {@code replicaId == 0}
     */
    public boolean isMainReplica() {
        return replicaId == 0;
    }

    /**
     * The data type of the local data.
     *
     * @return its dtype (bfloat16 for a bfloat16 tensor, which DJL itself reports as unknown)
     */
    public DataType dtype() {
        return DataTypes.of(data);
    }

    /**
     * A copy of the global shape.
     *
     * @return the global shape
     */
    @Override
    public long[] globalShape() {
        return globalShape.clone();
    }

    /**
     * A copy of the global offsets.
     *
     * @return the offsets
     */
    @Override
    public long[] globalOffset() {
        return globalOffset.clone();
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof ShardedTensor t && key.equals(t.key) && data == t.data
                && Arrays.equals(globalShape, t.globalShape) && Arrays.equals(globalOffset, t.globalOffset)
                && replicaId == t.replicaId;
    }

    @Override
    public int hashCode() {
        return Objects.hash(key, Arrays.hashCode(globalShape), Arrays.hashCode(globalOffset), replicaId);
    }

    @Override
    public String toString() {
        return "ShardedTensor{" + key + ", global=" + Arrays.toString(globalShape) + ", offset="
                + Arrays.toString(globalOffset) + ", local=" + data.getShape() + ", replica=" + replicaId + "}";
    }
}
