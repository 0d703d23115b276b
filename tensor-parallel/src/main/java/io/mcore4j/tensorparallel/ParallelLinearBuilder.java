package io.mcore4j.tensorparallel;

import io.mcore4j.core.fp8.Fp8Linear;
import io.mcore4j.core.fp8.Fp8Scaling;
import io.mcore4j.parallel.Communicator;

import java.util.Objects;

/**
 * The options {@link ColumnParallelLinear.Builder} and {@link RowParallelLinear.Builder} share
 * beyond {@link ParallelLayerBuilder}'s: the bias, whether it is added, and how it is created.
 *
 * @param <B> the concrete builder
 */
public abstract class ParallelLinearBuilder<B extends ParallelLinearBuilder<B>> extends ParallelLayerBuilder<B> {
    final int inputSize;
    final int outputSize;
    boolean bias = true;
    boolean skipBiasAdd;
    boolean tpCommOverlap;
    boolean gradientAccumulationFusion = true;
    Initializer biasInitializer = Initializers.zeros();
    Fp8Scaling fp8;

    ParallelLinearBuilder(int inputSize, int outputSize, Communicator tp, String defaultName) {
        super(tp, defaultName);
        this.inputSize = inputSize;
        this.outputSize = outputSize;
    }

    @SuppressWarnings("unchecked")
    private B self() {
        return (B) this;
    }

    /** @param value whether the layer has a bias (default true) @return this */
    public B bias(boolean value) {
        this.bias = value;
        return self();
    }

    /** @param value return the bias instead of adding it (default false) @return this */
    public B skipBiasAdd(boolean value) {
        this.skipBiasAdd = value;
        return self();
    }

    /**
     * @param value with {@link #sequenceParallel sequence parallelism}, overlap the layer's sequence
     *              all-gather or reduce-scatter with its GEMMs, piece by piece (Megatron's
     *              {@code --tp-comm-overlap}; same results as the composed collectives); default false
     * @return this
     */
    public B tpCommOverlap(boolean value) {
        this.tpCommOverlap = value;
        return self();
    }

    /**
     * @param value on GPUs, add the weight gradient into {@code .grad} inside its GEMM (Megatron's
     *              {@code gradient_accumulation_fusion}; default true; the CPU composes it whatever this says, unless
     *              {@code -Dmcore4j.tensorparallel.gradientAccumulationFusion=true})
     * @return this
     */
    public B gradientAccumulationFusion(boolean value) {
        this.gradientAccumulationFusion = value;
        return self();
    }

    /** Refuses {@link #tpCommOverlap} without sequence parallelism, naming the layer. */
    void checkTpCommOverlap() {
        if (tpCommOverlap && !sequenceParallel) {
            throw new IllegalArgumentException(name + ": tpCommOverlap overlaps the sequence-parallel collectives;"
                    + " it needs sequenceParallel(true)");
        }
    }

    /**
     * @param value the model's FP8 scaling state: the layer's GEMMs run in FP8 ({@link Fp8Linear}, three slots
     *              registered there under the layer's name), or null for the parameter dtype (the default)
     * @return this
     */
    public B fp8(Fp8Scaling value) {
        this.fp8 = value;
        return self();
    }

    /**
     * Refuses FP8 with {@link #tpCommOverlap} (whose pipelined GEMMs are not FP8) and this rank's weight dims that
     * FP8 GEMMs cannot take, naming the layer.
     *
     * @param localOut this rank's output dim
     * @param localIn this rank's input dim
     */
    void checkFp8(int localOut, int localIn) {
        if (fp8 == null) {
            return;
        }
        if (tpCommOverlap) {
            throw new IllegalArgumentException(name + ": FP8 GEMMs cannot be combined with tpCommOverlap (its pipelined"
                    + " GEMMs run in the parameter dtype); drop one of them");
        }
        Fp8Linear.checkDims(name, localIn, localOut);
    }

    /** @return the layer's FP8 GEMMs, or null without FP8 */
    Fp8Linear buildFp8() {
        return fp8 == null ? null : new Fp8Linear(name, fp8, manager);
    }

    /** @param value how the full bias is created, identically on every rank (default zeros) @return this */
    public B biasInitializer(Initializer value) {
        this.biasInitializer = Objects.requireNonNull(value, "biasInitializer");
        return self();
    }
}
