package io.mcore4j.tensorparallel;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.fp8.Fp8Linear;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.core.shard.ShardedTensor;
import io.mcore4j.parallel.Communicator;

import java.util.ArrayList;
import java.util.List;

/**
 * {@code y = x Aᵀ + b} with {@code A} split along its output dim: rank {@code r} of the
 * tensor-parallel group holds rows {@code [r·out/t, (r+1)·out/t)} of the {@code [out, in]} weight
 * (or, with a stride {@code k > 1}, the strided rows of {@link StridedPartition}) and the matching
 * part of the bias, and computes that slice of the output's last dim.
 *
 * <p>The input is replicated over the group ({@link Mappings#copyToTensorParallelRegion}: its
 * gradient is all-reduced in backward) or, with sequence parallelism, split along the sequence and
 * all-gathered first ({@link Mappings#gatherFromSequenceParallelRegion} with a reduce-scattered
 * gradient). When training with more than one rank, the copy (or the gather) and the linear run as one
 * Function whose backward overlaps the input gradient's all-reduce (reduce-scatter) with the
 * weight-gradient GEMM ({@link OverlappedColumnLinear}; same result). With
 * sequence parallelism and {@code tpCommOverlap} (Megatron's
 * {@code --tp-comm-overlap}) the gather and the linear run as one Function that pipelines the
 * all-gather piece by piece with the GEMMs ({@link PipelinedGatherLinear}; same result). With {@code gatherOutput} the output slices are all-gathered into the full output.
 * All communication is over the {@code tp} communicator given to the builder.
 *
 * <p>The layer owns its parameters (in the builder's manager) and closes them in {@link #close()}.
 * Weight and bias are split along dim 0 ({@link Parameter.Partition} {@code (0, rank, t)}), so each
 * rank is the main replica of its own shard.
 */
public final class ColumnParallelLinear implements ParallelLinear {
    private final String name;
    private final int inputSize;
    private final int outputSize;
    private final Communicator tp;
    private final boolean gatherOutput;
    private final boolean skipBiasAdd;
    private final boolean sequenceParallel;
    private final boolean tpCommOverlap;
    /** Whether the weight gradient may be added into {@code .grad} by its GEMM ({@link LocalLinear}). */
    private final boolean accumulationFusion;
    private final StridedPartition partition;
    private final Parameter weight;
    private final Parameter bias;
    private final List<ShardedTensor> stridedPieces = new ArrayList<>();
    private final NDManager manager;
    private final Fp8Linear fp8;

    private ColumnParallelLinear(Builder b) {
        this.name = b.name;
        this.inputSize = b.inputSize;
        this.outputSize = b.outputSize;
        this.tp = b.tp;
        this.gatherOutput = b.gatherOutput;
        this.skipBiasAdd = b.skipBiasAdd;
        this.sequenceParallel = b.sequenceParallel;
        this.tpCommOverlap = b.tpCommOverlap;
        this.accumulationFusion = b.gradientAccumulationFusion;
        this.manager = b.manager;
        this.partition = new StridedPartition(0, tp.rank(), tp.size(), b.stride);
        Shape weightShape = new Shape(outputSize, inputSize);
        Parameter.Partition split = new Parameter.Partition(0, tp.rank(), tp.size(), b.stride);
        this.weight = b.skipWeightAllocation ? null : new Parameter("weight",
                b.weightInitializer().createShard(manager, weightShape, b.dtype, partition), split, Parameter.Kind.DENSE);
        this.bias = b.bias ? new Parameter("bias",
                b.biasInitializer.createShard(manager, new Shape(outputSize), b.dtype, partition), split,
                Parameter.Kind.DENSE) : null;
        this.fp8 = b.buildFp8();
        if (partition.stride() > 1) {
            for (Parameter p : parameters()) {
                stridedPieces.addAll(partition.describe(p.name(), p.data(), manager, 0));
            }
        }
    }

    /**
     * A builder for a layer of {@code inputSize -> outputSize} split over {@code tp}.
     *
     * @param inputSize the input's last dim
     * @param outputSize the full output dim, divisible by {@code tp.size()}
     * @param tp the tensor-parallel communicator
     * @return the builder
     */
    public static Builder builder(int inputSize, int outputSize, Communicator tp) {
        return new Builder(inputSize, outputSize, tp);
    }

    /**
     * Applies the layer with its own weight.
     *
     * @param scope the pass's scope; owns the output
     * @param input {@code [s, b, in]}, or {@code [s/t, b, in]} with sequence parallelism
     * @return output {@code [s, b, out/t]} ({@code [s, b, out]} with {@code gatherOutput}) and the
     *         bias when {@code skipBiasAdd}
     * @throws IllegalStateException if the layer was built with {@code skipWeightAllocation}
     * @throws IllegalArgumentException if the input's last dim is not {@code inputSize}
     */
    @Override
    public LinearOutput forward(AutogradScope scope, NDArray input) {
        if (weight == null) {
            throw new IllegalStateException(name + " was built without a weight; pass one to forward");
        }
        return forward(scope, input, weight);
    }

    /**
     * Applies the layer with another weight of this layer's local shape {@code [out/t, in]}, such
     * as the word embedding's weight for a tied output layer (whose gradient then accumulates in
     * that parameter).
     *
     * @param scope the pass's scope; owns the output
     * @param input {@code [s, b, in]}, or {@code [s/t, b, in]} with sequence parallelism
     * @param weight the weight to use
     * @return as {@link #forward(AutogradScope, NDArray)}
     * @throws IllegalArgumentException if the weight's shape or the input's last dim is wrong
     */
    public LinearOutput forward(AutogradScope scope, NDArray input, Parameter weight) {
        Shape expected = new Shape(outputSize / tp.size(), inputSize);
        if (!weight.data().getShape().equals(expected)) {
            throw new IllegalArgumentException(name + ": weight " + weight.name() + " has shape "
                    + weight.data().getShape() + " but this layer's weight shard is " + expected);
        }
        LayerArguments.checkLastDim(input, inputSize, name, "the input size");
        NDArray addedBias = bias != null && !skipBiasAdd ? bias.data() : null;
        if (sequenceParallel && tpCommOverlap && tp.size() > 1) {
            NDArray local = addedBias == null
                    ? scope.apply1(new PipelinedGatherLinear(tp, accumulationFusion), input, weight.data())
                    : scope.apply1(new PipelinedGatherLinear(tp, accumulationFusion), input, weight.data(), addedBias);
            return new LinearOutput(local, bias != null && skipBiasAdd ? bias.data() : null);
        }
        if (tp.size() > 1 && scope.isGradEnabled() && fp8 == null) {
            // copy-to-region (or the sequence gather) and the linear as one Function: backward all-reduces
            // (reduce-scatters) the input gradient while it computes the weight gradient
            OverlappedColumnLinear f = new OverlappedColumnLinear(tp, sequenceParallel, accumulationFusion);
            NDArray local = addedBias == null ? scope.apply1(f, input, weight.data())
                    : scope.apply1(f, input, weight.data(), addedBias);
            NDArray out = gatherOutput ? Mappings.gatherFromTensorParallelRegion(scope, tp, local) : local;
            return new LinearOutput(out, bias != null && skipBiasAdd ? bias.data() : null);
        }
        NDArray x = sequenceParallel
                ? Mappings.gatherFromSequenceParallelRegion(scope, tp, input, true)
                : Mappings.copyToTensorParallelRegion(scope, tp, input);
        NDArray local = LocalLinear.apply(scope, fp8, x, weight, addedBias, accumulationFusion);
        NDArray out = gatherOutput ? Mappings.gatherFromTensorParallelRegion(scope, tp, local) : local;
        // without grad, a gathered input or a gathered-from output is dead here; with grad the scope
        // keeps what the mappings' Functions refer to, and at TP1 the mappings return what they got
        scope.release(x == input ? null : x, local == out ? null : local);
        return new LinearOutput(out, bias != null && skipBiasAdd ? bias.data() : null);
    }

    /**
     * This rank's weight shard {@code [out/t, in]}.
     *
     * @return the weight, or {@code null} when built with {@code skipWeightAllocation}
     */
    public Parameter weight() {
        return weight;
    }

    /**
     * This rank's bias shard {@code [out/t]}.
     *
     * @return the bias, or {@code null} when built without one
     */
    public Parameter bias() {
        return bias;
    }

    /** @return the partition of the weight and bias along dim 0, stride included */
    public StridedPartition partition() {
        return partition;
    }

    /** @return the tensor-parallel communicator the weight is split over */
    Communicator tp() {
        return tp;
    }

    /** @return whether the input arrives split along the sequence */
    boolean sequenceParallel() {
        return sequenceParallel;
    }

    /** @return whether the output slices are gathered into the full output */
    boolean gatherOutput() {
        return gatherOutput;
    }

    /** @return the full input size */
    public int inputSize() {
        return inputSize;
    }

    /** @return the full output size */
    public int outputSize() {
        return outputSize;
    }

    /** @return the weight (if allocated) and the bias (if any), in that order */
    @Override
    public List<Parameter> parameters() {
        List<Parameter> out = new ArrayList<>(2);
        if (weight != null) {
            out.add(weight);
        }
        if (bias != null) {
            out.add(bias);
        }
        return out;
    }

    /**
     * Each shard at its place in the full {@code [out, in]} weight and {@code [out]} bias, main
     * replica on every rank (each rank holds a different piece). With a stride {@code k > 1} each
     * parameter yields {@code k} pieces under the same key, one per strided chunk.
     *
     * @param prefix the module path ending in a dot, or empty
     * @return never null
     */
    @Override
    public List<ShardedTensor> shardedState(String prefix) {
        List<ShardedTensor> out = new ArrayList<>();
        if (partition.stride() > 1) {
            for (ShardedTensor t : stridedPieces) {
                out.add(t.withPrefix(prefix));
            }
            return out;
        }
        for (Parameter p : parameters()) {
            out.addAll(partition.describe(prefix + p.name(), p.data(), manager, 0));
        }
        return out;
    }

    @Override
    public Fp8Linear fp8() {
        return fp8;
    }

    /** Closes the parameters and the views kept for checkpoint pieces. */
    @Override
    public void close() {
        for (ShardedTensor t : stridedPieces) {
            t.data().close();
        }
        if (fp8 != null) {
            fp8.close();
        }
        ParallelLinear.super.close();
    }

    @Override
    public String toString() {
        return name + "{" + inputSize + " -> " + outputSize + ", tp " + tp.rank() + "/" + tp.size()
                + (partition.stride() > 1 ? ", stride " + partition.stride() : "")
                + (sequenceParallel ? ", sequence parallel" : "") + (fp8 != null ? ", fp8" : "") + (tpCommOverlap ? ", tp comm overlap" : "") + (gatherOutput ? ", gather output" : "") + "}";
    }

    /** Options of a {@link ColumnParallelLinear}; {@link #manager} is required. */
    public static final class Builder extends ParallelLinearBuilder<Builder> {
        private boolean gatherOutput;
        private boolean skipWeightAllocation;
        private int stride = 1;

        private Builder(int inputSize, int outputSize, Communicator tp) {
            super(inputSize, outputSize, tp, "column-parallel-linear");
        }

        /** @param value all-gather the output's last dim (default false) @return this */
        public Builder gatherOutput(boolean value) {
            this.gatherOutput = value;
            return this;
        }

        /**
         * @param value create no weight: every forward must pass one (an output layer tied to the
         *              embedding); default false
         * @return this
         */
        public Builder skipWeightAllocation(boolean value) {
            this.skipWeightAllocation = value;
            return this;
        }

        /** @param value the strided partition's stride, e.g. 2 for a fused GLU weight (default 1) @return this */
        public Builder stride(int value) {
            this.stride = value;
            return this;
        }

        /**
         * Validates the options and creates the parameters.
         *
         * @return the layer
         * @throws IllegalArgumentException if the output size is not divisible by the tensor-parallel
         *         size, the stride does not divide the partition, or options conflict
         * @throws IllegalStateException if no manager was given
         */
        public ColumnParallelLinear build() {
            checkCommon("input size", inputSize);
            int perRank = LayerArguments.divide(outputSize, tp.size(), name + ": output size");
            if (stride < 1 || perRank % stride != 0) {
                throw new IllegalArgumentException(name + ": stride " + stride + " does not divide the partition size "
                        + perRank + " (output size " + outputSize + " / tensor parallel size " + tp.size() + ")");
            }
            if (sequenceParallel && gatherOutput) {
                throw new IllegalArgumentException(name + ": gatherOutput cannot be combined with sequence parallelism");
            }
            checkTpCommOverlap();
            checkFp8(perRank, inputSize);
            return new ColumnParallelLinear(this);
        }
    }
}
