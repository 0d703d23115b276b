package io.mcore4j.tensorparallel;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;

/**
 * How a parallel layer creates a weight.
 *
 * <p>{@link #create} builds the full (master) weight. By default a layer obtains its shard through
 * {@link #createShard}, which builds the full weight and keeps this rank's part, so every
 * tensor-parallel shard equals the corresponding slice of the weight a single rank would create,
 * bit for bit. Initializers for models too large for that ({@link Initializers#normalPerRank})
 * override {@link #createShard} to draw only the shard. Implementations must be deterministic:
 * never use libtorch's process-wide generator.
 */
@FunctionalInterface
public interface Initializer {

    /**
     * Creates the full weight.
     *
     * @param manager the manager that will own the result
     * @param fullShape the full, unpartitioned shape
     * @param dtype the result's dtype
     * @return a new tensor owned by {@code manager}
     */
    NDArray create(NDManager manager, Shape fullShape, DataType dtype);

    /**
     * Creates this rank's part of the weight. The default builds the full weight in a temporary
     * manager and copies out {@code partition}'s slice.
     *
     * @param manager the manager that will own the result
     * @param fullShape the full, unpartitioned shape
     * @param dtype the result's dtype
     * @param partition which part to create
     * @return a new tensor of {@code partition.localShape(fullShape)} owned by {@code manager}
     * @throws IllegalArgumentException if the shape is not divisible as the partition needs
     */
    default NDArray createShard(NDManager manager, Shape fullShape, DataType dtype, StridedPartition partition) {
        partition.chunkSize(fullShape); // validates before the full weight is built
        if (partition.count() == 1) {
            return create(manager, fullShape, dtype);
        }
        try (NDManager temp = manager.newSubManager()) {
            NDArray full = create(temp, fullShape, dtype);
            return partition.slice(full, manager);
        }
    }
}
