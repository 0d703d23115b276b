package io.mcore4j.tensorparallel;

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
    Initializer biasInitializer = Initializers.zeros();

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

    /** Refuses {@link #tpCommOverlap} without sequence parallelism, naming the layer. */
    void checkTpCommOverlap() {
        if (tpCommOverlap && !sequenceParallel) {
            throw new IllegalArgumentException(name + ": tpCommOverlap overlaps the sequence-parallel collectives;"
                    + " it needs sequenceParallel(true)");
        }
    }

    /** @param value how the full bias is created, identically on every rank (default zeros) @return this */
    public B biasInitializer(Initializer value) {
        this.biasInitializer = Objects.requireNonNull(value, "biasInitializer");
        return self();
    }
}
