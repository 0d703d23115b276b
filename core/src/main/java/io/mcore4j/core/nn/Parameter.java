package io.mcore4j.core.nn;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.shard.ShardedTensor;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Objects;

/**
 * A trainable tensor and how it relates to the global (unpartitioned) weight.
 *
 * <p>The parameter owns {@link #data()} (a leaf that requires grad, in the manager given at
 * creation) and its accumulated gradient; {@link #close()} releases both. {@link #clearGradient()}
 * replaces the leaf by a new one over the same storage (how a gradient is set to "none"), so
 * code asks {@link #data()} each time it uses the tensor and keeps no handle of it across steps; a
 * view kept for checkpoints is taken from a detached handle ({@code Tensors.detach}), which shares
 * the storage without holding the leaf. {@link #partition()} says
 * along which dim this rank holds which part ({@link Partition#NONE} for a replicated weight).
 * {@link Kind} tells the optimizer over which group the gradient is averaged and whether the tensor
 * counts once or per rank in the global gradient norm.
 */
public final class Parameter implements AutoCloseable {

    /** How the gradient of a parameter is reduced across ranks. */
    public enum Kind {
        /** Dense weight: gradient averaged over data-parallel (x context-parallel) ranks. */
        DENSE,
        /**
         * Weight replicated across tensor-parallel ranks but fed sequence-parallel activations (norms,
         * row-parallel biases with SP): its gradient is first summed over the TP group.
         */
        SEQUENCE_PARALLEL,
        /** Expert weight: gradient averaged over the expert-data-parallel group. */
        EXPERT
    }

    /**
     * Which part of the global tensor this rank holds.
     *
     * @param dim the tensor dim along which the weight is split, or -1 when it is not split
     * @param index this rank's part
     * @param count number of parts (the tensor-parallel size for TP layers)
     * @param stride 1 for a contiguous part; k when the weight fuses k tensors ([gate; up] of
     *     SwiGLU: k = 2) and this rank holds its part of each, i.e. k separate global row ranges
     */
    public record Partition(int dim, int index, int count, int stride) {
        /** A weight that every rank holds whole. */
        public static final Partition NONE = new Partition(-1, 0, 1);

        /**
         * A contiguous part.
         *
         * @param dim the split dim, or -1
         * @param index this rank's part
         * @param count number of parts
         */
        public Partition(int dim, int index, int count) {
            this(dim, index, count, 1);
        }

        /** Validates the indices. */
        public Partition {
            if (count < 1 || index < 0 || index >= count) {
                throw new IllegalArgumentException("partition index " + index + " of " + count + " is invalid");
            }
            if (stride < 1) {
                throw new IllegalArgumentException("partition stride " + stride + " must be at least 1");
            }
            if (dim < 0 && (dim != -1 || count != 1)) {
                throw new IllegalArgumentException("a weight split into " + count + " parts needs a dim >= 0");
            }
        }

        /**
         * Whether the weight is split.
         *
         * @return true if {@code dim >= 0}
         */
        public boolean isSplit() {
            return dim >= 0;
        }

        /**
         * Where this rank's part sits along {@link #dim()} in the global weight. The global weight is
         * cut along the dim into {@code count * stride} equal chunks, and part {@code index} is chunks
         * {@code index, index + count, ..., index + (stride - 1) * count}, concatenated in that order.
         * So a part of {@code localSize} yields {@code stride} runs of {@code len = localSize / stride}:
         * run {@code j} holds local indices from {@code j * len} and global indices from
         * {@code (j * count + index) * len}. With stride 1 that is the single run at
         * {@code index * localSize}; a weight that is not split yields the single run at 0.
         *
         * <p>This is the one definition of the strided layout: tensor-parallel layers cut their
         * shards by it and the optimizer places its state by it.
         *
         * @param localSize this rank's size along {@link #dim()} (any size when not split)
         * @return {@code stride} runs in local order, never empty
         * @throws IllegalArgumentException if {@code localSize} is negative or not divisible by the stride
         */
        public List<Run> runs(long localSize) {
            if (localSize < 0 || localSize % stride != 0) {
                throw new IllegalArgumentException("stride " + stride + " does not divide the local size " + localSize
                        + " along dim " + dim);
            }
            long len = localSize / stride;
            List<Run> out = new ArrayList<>(stride);
            for (int j = 0; j < stride; j++) {
                out.add(new Run(j * len, len, ((long) j * count + index) * len));
            }
            return List.copyOf(out);
        }
    }

    /**
     * One contiguous run of a part along its split dim: local indices
     * {@code [localStart, localStart + length)} are global indices {@code [globalStart, globalStart + length)}.
     *
     * @param localStart first local index
     * @param length number of indices
     * @param globalStart first global index
     */
    public record Run(long localStart, long length, long globalStart) {
        /** Validates that the run is not negative. */
        public Run {
            if (localStart < 0 || length < 0 || globalStart < 0) {
                throw new IllegalArgumentException("run of " + length + " from local " + localStart + " to global "
                        + globalStart + " must not be negative");
            }
        }
    }

    private final String name;
    private NDArray data;
    private final Partition partition;
    private final Kind kind;
    private boolean trainable = true;

    /**
     * Takes ownership of {@code data} and marks it as requiring grad.
     *
     * @param name local name within its module, e.g. {@code "weight"}
     * @param data the local tensor; this parameter closes it
     * @param partition which part of the global weight it is
     * @param kind how its gradient is reduced
     */
    public Parameter(String name, NDArray data, Partition partition, Kind kind) {
        this.name = Objects.requireNonNull(name, "name");
        this.data = Objects.requireNonNull(data, "data");
        this.partition = Objects.requireNonNull(partition, "partition");
        this.kind = Objects.requireNonNull(kind, "kind");
        if (partition.isSplit() && partition.dim() >= data.getShape().dimension()) {
            throw new IllegalArgumentException("parameter " + name + " of shape " + data.getShape()
                    + " cannot be split along dim " + partition.dim());
        }
        data.setRequiresGradient(true);
    }

    /**
     * A replicated dense parameter.
     *
     * @param name local name
     * @param data the tensor, owned from now on
     * @return the parameter
     */
    public static Parameter replicated(String name, NDArray data) {
        return new Parameter(name, data, Partition.NONE, Kind.DENSE);
    }

    /** @return the local name */
    public String name() {
        return name;
    }

    /**
     * The local tensor: a leaf that requires grad. The handle changes at {@link #clearGradient()}
     * (the storage does not): ask for it each time rather than keeping it.
     *
     * @return the current leaf
     */
    public NDArray data() {
        return data;
    }

    /** @return which part of the global weight this is */
    public Partition partition() {
        return partition;
    }

    /** @return how the gradient is reduced */
    public Kind kind() {
        return kind;
    }

    /**
     * Freezes the parameter (a base weight under LoRA): its tensor no longer requires grad, so no
     * backward computes or accumulates a gradient for it. Trainers hand only {@link #isTrainable()
     * trainable} parameters to gradient synchronisation and the optimizer, and checkpoint only
     * those. Irreversible; calling it twice is harmless.
     */
    public void freeze() {
        trainable = false;
        data.setRequiresGradient(false);
    }

    /** @return false once {@link #freeze()} was called: no gradient, no optimizer state */
    public boolean isTrainable() {
        return trainable;
    }

    /** @return the shape of the whole, unpartitioned weight */
    public long[] globalShape() {
        // DJL hands out its cached array: copy before writing
        long[] shape = data.getShape().getShape().clone();
        if (partition.isSplit()) {
            shape[partition.dim()] *= partition.count();
        }
        return shape;
    }

    /**
     * The accumulated gradient, or null when no backward reached this parameter.
     *
     * @param owner manager that owns the returned handle
     * @return a handle to {@code .grad} (shares its storage) or null
     */
    public NDArray gradient(NDManager owner) {
        return Tensors.gradientOrNull(data, owner);
    }

    /** Zeroes the accumulated gradient in place (keeps it allocated; no-op when there is none). */
    public void zeroGradient() {
        Tensors.zeroGradient(data);
    }

    /**
     * Sets the gradient to none (PyTorch's {@code zero_grad(set_to_none=True)}): afterwards
     * {@link #gradient} returns null until a backward reaches this parameter, and that backward's
     * gradient becomes {@code .grad} as it is instead of being added into zeros. The leaf behind
     * {@link #data()} is replaced by a new one over the same storage ({@link Tensors#renewLeaf});
     * the old handle is closed.
     */
    public void clearGradient() {
        if (!trainable) {
            return; // a frozen tensor has no gradient, and a renewed leaf would require one
        }
        data = Tensors.renewLeaf(data);
    }

    /**
     * This rank's piece for checkpoints, keyed {@code prefix + name}.
     *
     * @param prefix the module path, e.g. {@code "decoder.layers.3.mlp.fc1."}
     * @param replicaId 0 if this rank writes the piece
     * @return the description
     * @throws IllegalStateException if the parameter is strided ({@link Partition#stride()} above 1):
     *     its part is {@link Partition#runs several rectangles} of the global weight, not one
     */
    public ShardedTensor sharded(String prefix, int replicaId) {
        if (partition.stride() > 1) {
            throw new IllegalStateException("parameter " + name + " is strided (stride " + partition.stride()
                    + "): its part is " + partition.stride() + " rectangles of the global weight, not one");
        }
        long[] local = data.getShape().getShape();
        long[] offset = new long[local.length];
        if (partition.isSplit()) {
            offset[partition.dim()] = partition.runs(local[partition.dim()]).get(0).globalStart();
        }
        return new ShardedTensor(prefix + name, data, globalShape(), offset, replicaId);
    }

    /** Releases the tensor and its gradient. */
    @Override
    public void close() {
        data.close();
    }

    @Override
    public String toString() {
        return "Parameter{" + name + ", local=" + data.getShape() + ", global=" + Arrays.toString(globalShape())
                + ", partition=" + partition + ", kind=" + kind + (trainable ? "" : ", frozen") + "}";
    }
}
