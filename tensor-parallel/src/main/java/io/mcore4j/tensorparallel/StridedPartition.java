package io.mcore4j.tensorparallel;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDArrays;
import ai.djl.ndarray.NDList;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.core.shard.ShardedTensor;

import java.util.ArrayList;
import java.util.List;

/**
 * Which part of a full weight one tensor-parallel rank holds: the full weight is cut along
 * {@code dim} into {@code count * stride} equal chunks and part {@code index} consists of chunks
 * {@code index, index + count, ..., index + (stride - 1) * count}, concatenated in that order.
 *
 * <p>With {@code stride == 1} this is the plain contiguous split. A larger stride is for fused
 * weights: a GLU's {@code [gate; up]} weight built with stride 2 gives each rank its own slice of
 * the gate followed by its own slice of the up projection, which is Megatron-Core's strided
 * partition.
 *
 * @param dim the tensor dim that is split
 * @param index this rank's part, in {@code [0, count)}
 * @param count number of parts (the tensor-parallel size)
 * @param stride number of chunks per part, at least 1
 */
public record StridedPartition(int dim, int index, int count, int stride) {

    /**
     * Validates the indices.
     *
     * @throws IllegalArgumentException if a value is out of range
     */
    public StridedPartition {
        if (dim < 0) {
            throw new IllegalArgumentException("partition dim must be >= 0, got " + dim);
        }
        if (count < 1 || index < 0 || index >= count) {
            throw new IllegalArgumentException("partition index " + index + " of " + count + " is invalid");
        }
        if (stride < 1) {
            throw new IllegalArgumentException("partition stride must be at least 1, got " + stride);
        }
    }

    /**
     * The whole tensor as a single part.
     *
     * @return a partition with one part
     */
    public static StridedPartition whole() {
        return new StridedPartition(0, 0, 1, 1);
    }

    /**
     * Size of one chunk along {@link #dim()} for a full weight of {@code fullShape}.
     *
     * @param fullShape the full weight's shape
     * @return {@code fullShape[dim] / (count * stride)}
     * @throws IllegalArgumentException if the dim is not divisible into {@code count * stride} chunks
     */
    public long chunkSize(Shape fullShape) {
        if (dim >= fullShape.dimension()) {
            throw new IllegalArgumentException("cannot split a weight of shape " + fullShape + " along dim " + dim);
        }
        long size = fullShape.get(dim);
        if (size % count != 0) {
            throw new IllegalArgumentException("dim " + dim + " of size " + size
                    + " is not divisible by tensor parallel size " + count);
        }
        long part = size / count;
        if (part % stride != 0) {
            throw new IllegalArgumentException("stride " + stride + " does not divide the partition size " + part
                    + " (dim " + dim + " of size " + size + " split " + count + " ways)");
        }
        return part / stride;
    }

    /**
     * Shape of this rank's part.
     *
     * @param fullShape the full weight's shape
     * @return the shape with {@code dim} divided by {@code count}
     */
    public Shape localShape(Shape fullShape) {
        long[] s = fullShape.getShape().clone(); // DJL returns its internal array
        s[dim] = chunkSize(fullShape) * stride;
        return new Shape(s);
    }

    /**
     * Copies this rank's part out of {@code full}.
     *
     * @param full the full weight (not modified)
     * @param owner the manager that will own the result
     * @return a new contiguous tensor of {@link #localShape}, owned by {@code owner}
     */
    public NDArray slice(NDArray full, NDManager owner) {
        long localSize = chunkSize(full.getShape()) * stride;
        try (NDManager temp = owner.newSubManager()) {
            NDList pieces = new NDList();
            for (Parameter.Run run : runs(localSize)) {
                long start = run.globalStart();
                NDArray piece = Tensors.narrow(full, dim, start, start + run.length());
                piece.attach(temp);
                pieces.add(piece);
            }
            NDArray out = stride == 1 ? pieces.get(0).duplicate() : NDArrays.concat(pieces, dim);
            out.attach(owner);
            return out;
        }
    }

    /**
     * The checkpoint description of a weight every rank of the group holds whole.
     *
     * @param key the tensor's key
     * @param data the whole tensor
     * @param replicaId 0 on the rank that writes it (tensor-parallel rank 0), else non-zero
     * @return the description
     */
    static ShardedTensor replicated(String key, NDArray data, int replicaId) {
        long[] shape = data.getShape().getShape().clone();
        return new ShardedTensor(key, data, shape, new long[shape.length], replicaId);
    }

    /**
     * Checkpoint pieces of a local part: one piece per stride chunk, all under {@code key}, each
     * placed at its offset in the full tensor.
     *
     * @param key the global tensor's key
     * @param local this rank's part, as {@link #slice} returns it
     * @param owner the manager that will own the views of {@code local} made for {@code stride > 1}
     *              (they share {@code local}'s storage, so in-place updates of the weight show
     *              through); unused, and may be null, when {@code stride == 1}
     * @param replicaId 0 for the main replica
     * @return {@code stride} descriptions (the data of each is {@code local} or a view of it)
     */
    public List<ShardedTensor> describe(String key, NDArray local, NDManager owner, int replicaId) {
        long[] localShape = local.getShape().getShape().clone(); // DJL returns its internal array
        long[] global = localShape.clone();
        global[dim] *= count;
        List<ShardedTensor> out = new ArrayList<>(stride);
        // views of a detached handle: they share the parameter's storage but not its autograd history
        NDArray base = stride > 1 ? Tensors.detach(local, owner) : local;
        for (Parameter.Run run : runs(localShape[dim])) {
            NDArray data = local;
            if (stride > 1) {
                data = Tensors.narrow(base, dim, run.localStart(), run.localStart() + run.length());
                data.attach(owner);
            }
            long[] offset = new long[localShape.length];
            offset[dim] = run.globalStart();
            out.add(new ShardedTensor(key, data, global, offset, replicaId));
        }
        return out;
    }

    /**
     * @return the same split as the {@link Parameter.Partition} a parameter holding this part
     *     carries ({@link Parameter.Partition#NONE} for a single part), which the optimizer uses to
     *     place its state
     */
    public Parameter.Partition parameterPartition() {
        return count == 1 ? Parameter.Partition.NONE : new Parameter.Partition(dim, index, count, stride);
    }

    /**
     * The runs of a part of {@code localSize} along {@link #dim()}, as {@link Parameter.Partition#runs}
     * defines them for the parameters built from this partition.
     */
    private List<Parameter.Run> runs(long localSize) {
        return new Parameter.Partition(dim, index, count, stride).runs(localSize);
    }
}
