package io.mcore4j.tensorparallel;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.fp8.Fp8Linear;
import io.mcore4j.core.autograd.Function;
import io.mcore4j.core.autograd.FunctionContext;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.core.shard.ShardedTensor;
import io.mcore4j.parallel.Communicator;

import java.util.ArrayList;
import java.util.List;

/**
 * {@code y = x Aᵀ + b} with {@code A} split along its input dim: rank {@code r} of the
 * tensor-parallel group holds columns {@code [r·in/t, (r+1)·in/t)} of the {@code [out, in]}
 * weight, multiplies its slice of the input's last dim, and the partial results are summed over
 * the group ({@link Mappings#reduceFromTensorParallelRegion}) or, with sequence parallelism,
 * reduce-scattered along the sequence ({@link Mappings#reduceScatterToSequenceParallelRegion}).
 * The bias is replicated and enters the sum once: each of the {@code t} ranks adds {@code b/t}
 * inside its GEMM (the epilogue, no separate broadcast add). Without sequence parallelism the
 * backward of that share passes the gradient through unscaled, so every rank's bias gradient is
 * {@code Σ dy}, as if {@code b} had been added after the reduction; with it, each rank's gradient
 * is {@code Σ dy / t}, and the group sum that sequence-parallel gradients get before use is
 * {@code Σ dy}. At {@code t = 1} the bias goes into the GEMM as it is. With sequence parallelism and
 * {@code tpCommOverlap} (Megatron's {@code --tp-comm-overlap}) the GEMM and the reduce-scatter run as
 * one Function that starts each piece's reduction while it computes the next piece
 * ({@link PipelinedLinearReduceScatter}; same result, same bias gradients).
 *
 * <p>All communication is over the {@code tp} communicator given to the builder. The layer owns its
 * parameters (in the builder's manager). The weight is split along dim 1; the bias is whole on
 * every rank ({@link Parameter.Partition#NONE}), of kind {@link Parameter.Kind#SEQUENCE_PARALLEL}
 * with sequence parallelism (each rank's gradient covers only its sequence chunk and must be summed
 * over the group) and {@link Parameter.Kind#DENSE} otherwise; in checkpoints only tensor-parallel
 * rank 0 is its main replica.
 */
public final class RowParallelLinear implements ParallelLinear {
    private final String name;
    private final int inputSize;
    private final int outputSize;
    private final Communicator tp;
    private final boolean inputIsParallel;
    private final boolean skipBiasAdd;
    private final boolean sequenceParallel;
    private final boolean tpCommOverlap;
    /** Whether the weight gradient may be added into {@code .grad} by its GEMM ({@link LocalLinear}). */
    private final boolean accumulationFusion;
    private final Parameter weight;
    private final Parameter bias;
    private final Fp8Linear fp8;

    private RowParallelLinear(Builder b) {
        this.name = b.name;
        this.inputSize = b.inputSize;
        this.outputSize = b.outputSize;
        this.tp = b.tp;
        this.inputIsParallel = b.inputIsParallel;
        this.skipBiasAdd = b.skipBiasAdd;
        this.sequenceParallel = b.sequenceParallel;
        this.tpCommOverlap = b.tpCommOverlap;
        this.accumulationFusion = b.gradientAccumulationFusion;
        StridedPartition columns = new StridedPartition(1, tp.rank(), tp.size(), 1);
        this.weight = new Parameter("weight",
                b.weightInitializer().createShard(b.manager, new Shape(outputSize, inputSize), b.dtype, columns),
                new Parameter.Partition(1, tp.rank(), tp.size()), Parameter.Kind.DENSE);
        this.bias = b.bias ? new Parameter("bias", b.biasInitializer.create(b.manager, new Shape(outputSize), b.dtype),
                Parameter.Partition.NONE, sequenceParallel ? Parameter.Kind.SEQUENCE_PARALLEL : Parameter.Kind.DENSE)
                : null;
        this.fp8 = b.buildFp8();
    }

    /**
     * A builder for a layer of {@code inputSize -> outputSize} split over {@code tp}.
     *
     * @param inputSize the full input size, divisible by {@code tp.size()}
     * @param outputSize the output's last dim
     * @param tp the tensor-parallel communicator
     * @return the builder
     */
    public static Builder builder(int inputSize, int outputSize, Communicator tp) {
        return new Builder(inputSize, outputSize, tp);
    }

    /**
     * Applies the layer.
     *
     * @param scope the pass's scope; owns the output
     * @param input {@code [s, b, in/t]} when the input is parallel (the default), else {@code [s, b, in]}
     * @return output {@code [s, b, out]}, or {@code [s/t, b, out]} with sequence parallelism, and the
     *         bias when {@code skipBiasAdd}
     * @throws IllegalArgumentException if the input's last dim is wrong, or with sequence
     *         parallelism if {@code s} is not divisible by the tensor-parallel size
     */
    @Override
    public LinearOutput forward(AutogradScope scope, NDArray input) {
        NDArray x;
        if (inputIsParallel) {
            LayerArguments.checkLastDim(input, inputSize / tp.size(), name,
                    "input size " + inputSize + " / tensor parallel size " + tp.size());
            x = input;
        } else {
            LayerArguments.checkLastDim(input, inputSize, name, "the input size");
            x = Mappings.scatterToTensorParallelRegion(scope, tp, input);
        }
        if (sequenceParallel) {
            Mappings.checkSequenceLength(x.getShape().get(0), tp);
        }
        if (sequenceParallel && tpCommOverlap && tp.size() > 1) {
            NDArray addedBias = bias != null && !skipBiasAdd ? bias.data() : null;
            NDArray out = addedBias == null
                    ? scope.apply1(new PipelinedLinearReduceScatter(tp, accumulationFusion), x, weight.data())
                    : scope.apply1(new PipelinedLinearReduceScatter(tp, accumulationFusion), x, weight.data(), addedBias);
            return new LinearOutput(out, bias != null && skipBiasAdd ? bias.data() : null);
        }
        NDArray share = null;
        if (bias != null && !skipBiasAdd) {
            if (tp.size() == 1) {
                share = bias.data();
            } else if (sequenceParallel) {
                // each rank's gradient is then the group sum over t: a sequence-parallel bias's
                // gradients are summed over the group before use, which makes it Σ dy
                share = Tensors.scale(bias.data(), 1.0 / tp.size(), scope.manager());
            } else {
                share = scope.apply1(new BiasShare(tp.size()), bias.data());
            }
        }
        NDArray partial = LocalLinear.apply(scope, fp8, x, weight, share, accumulationFusion);
        NDArray out = sequenceParallel
                ? Mappings.reduceScatterToSequenceParallelRegion(scope, tp, partial)
                : Mappings.reduceFromTensorParallelRegion(scope, tp, partial);
        // the partial product is dead once reduced (at TP1 it is the output), the bias share once
        // multiplied; the scope keeps either while a Function refers to it
        scope.release(partial == out ? null : partial, bias != null && share == bias.data() ? null : share);
        return new LinearOutput(out, bias != null && skipBiasAdd ? bias.data() : null);
    }

    /**
     * One rank's share {@code b/t} of the bias in forward; the gradient passes through unscaled in
     * backward, because the sum over the {@code t} ranks depends on {@code b} with weight one.
     */
    private record BiasShare(int parts) implements Function {
        @Override
        public NDArray[] forward(FunctionContext ctx, NDArray... inputs) {
            return new NDArray[] {Tensors.scale(inputs[0], 1.0 / parts, ctx.manager())};
        }

        @Override
        public NDArray[] backward(FunctionContext ctx, NDArray... grads) {
            return new NDArray[] {grads[0]};
        }

        @Override
        public String name() {
            return "row-parallel-bias-share";
        }
    }

    /** @return this rank's weight shard {@code [out, in/t]} */
    public Parameter weight() {
        return weight;
    }

    /** @return the replicated bias {@code [out]}, or {@code null} when built without one */
    public Parameter bias() {
        return bias;
    }

    /** @return the tensor-parallel communicator the weight is split over */
    Communicator tp() {
        return tp;
    }

    /** @return whether the output is reduce-scattered along the sequence */
    boolean sequenceParallel() {
        return sequenceParallel;
    }

    /** @return whether the input arrives split along its last dim */
    boolean inputIsParallel() {
        return inputIsParallel;
    }

    /** @return the full input size */
    public int inputSize() {
        return inputSize;
    }

    /** @return the output size */
    public int outputSize() {
        return outputSize;
    }

    /** @return the weight and the bias (if any), in that order */
    @Override
    public List<Parameter> parameters() {
        return bias == null ? List.of(weight) : List.of(weight, bias);
    }

    /**
     * The weight shard at its column offset (main replica on every rank) and the whole bias, main
     * replica on tensor-parallel rank 0 only ({@code replicaId} = the tensor-parallel rank).
     *
     * @param prefix the module path ending in a dot, or empty
     * @return never null
     */
    @Override
    public List<ShardedTensor> shardedState(String prefix) {
        List<ShardedTensor> out = new ArrayList<>(2);
        out.addAll(new StridedPartition(1, tp.rank(), tp.size(), 1).describe(prefix + weight.name(), weight.data(), null, 0));
        if (bias != null) {
            out.add(StridedPartition.replicated(prefix + bias.name(), bias.data(), tp.rank()));
        }
        return out;
    }

    @Override
    public Fp8Linear fp8() {
        return fp8;
    }

    /** Closes the parameters and the FP8 weight copies. */
    @Override
    public void close() {
        if (fp8 != null) {
            fp8.close();
        }
        ParallelLinear.super.close();
    }

    @Override
    public String toString() {
        return name + "{" + inputSize + " -> " + outputSize + ", tp " + tp.rank() + "/" + tp.size()
                + (sequenceParallel ? ", sequence parallel" : "") + (fp8 != null ? ", fp8" : "") + (tpCommOverlap ? ", tp comm overlap" : "") + (inputIsParallel ? "" : ", scatters input") + "}";
    }

    /** Options of a {@link RowParallelLinear}; {@link #manager} is required. */
    public static final class Builder extends ParallelLinearBuilder<Builder> {
        private boolean inputIsParallel = true;

        private Builder(int inputSize, int outputSize, Communicator tp) {
            super(inputSize, outputSize, tp, "row-parallel-linear");
        }

        /** @param value the input arrives split along its last dim (default true); else it is scattered here @return this */
        public Builder inputIsParallel(boolean value) {
            this.inputIsParallel = value;
            return this;
        }

        /**
         * Validates the options and creates the parameters.
         *
         * @return the layer
         * @throws IllegalArgumentException if the input size is not divisible by the tensor-parallel
         *         size, or sequence parallelism is asked for with a replicated input
         * @throws IllegalStateException if no manager was given
         */
        public RowParallelLinear build() {
            checkCommon("output size", outputSize);
            LayerArguments.divide(inputSize, tp.size(), name + ": input size");
            if (sequenceParallel && !inputIsParallel) {
                throw new IllegalArgumentException(name + ": sequence parallelism needs inputIsParallel(true)");
            }
            checkTpCommOverlap();
            checkFp8(outputSize, inputSize / tp.size());
            return new RowParallelLinear(this);
        }
    }
}
