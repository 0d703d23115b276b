package io.mcore4j.tensorparallel;

import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import io.mcore4j.parallel.Communicator;

import java.util.Objects;

/**
 * The options every tensor-parallel layer's builder shares: the group, how the full weight is
 * created, the parameters' dtype and owning manager, the name used in keys and messages, and
 * sequence parallelism. {@link ColumnParallelLinear.Builder}, {@link RowParallelLinear.Builder} and
 * {@link VocabParallelEmbedding.Builder} add their own options and validate them in {@code build()}.
 *
 * @param <B> the concrete builder, returned by every option so that calls chain
 */
public abstract class ParallelLayerBuilder<B extends ParallelLayerBuilder<B>> {
    /** The tensor-parallel group the layer splits its weight over and communicates on. */
    final Communicator tp;
    boolean sequenceParallel;
    DataType dtype = DataType.FLOAT32;
    NDManager manager;
    String name;
    private Initializer initializer;
    private long seed = Initializers.DEFAULT_SEED;

    ParallelLayerBuilder(Communicator tp, String defaultName) {
        this.tp = Objects.requireNonNull(tp, "tp");
        this.name = defaultName;
    }

    @SuppressWarnings("unchecked")
    private B self() {
        return (B) this;
    }

    /**
     * @param value split the activations along the sequence (dim 0) across the group: the layer
     *              gathers its input or reduce-scatters its output there (default false)
     * @return this
     */
    public B sequenceParallel(boolean value) {
        this.sequenceParallel = value;
        return self();
    }

    /** @param value how the full weight is created (default: {@link #seed(long) per-layer normal(0.02)}) @return this */
    public B initializer(Initializer value) {
        this.initializer = Objects.requireNonNull(value, "initializer");
        return self();
    }

    /**
     * @param value the base seed of the default weight initializer,
     *              {@link Initializers#normalForKey}{@code (name + ".weight", 0.02, seed)}: layers
     *              with different {@link #name names} get different weights, identical at every
     *              tensor-parallel size (default {@value Initializers#DEFAULT_SEED}, Megatron-LM's
     *              {@code --seed}); ignored when an {@link #initializer} is given
     * @return this
     */
    public B seed(long value) {
        this.seed = value;
        return self();
    }

    /** @param value the parameters' dtype (default float32) @return this */
    public B dtype(DataType value) {
        this.dtype = LayerArguments.checkFloating(value);
        return self();
    }

    /** @param value the manager that owns the parameters (required) @return this */
    public B manager(NDManager value) {
        this.manager = Objects.requireNonNull(value, "manager");
        return self();
    }

    /** @param value the layer's name in messages and default initializer keys @return this */
    public B name(String value) {
        this.name = Objects.requireNonNull(value, "name");
        return self();
    }

    /** The weight's initializer: the one given, else the per-layer default of {@link #seed}. */
    Initializer weightInitializer() {
        return initializer != null ? initializer : Initializers.normalForKey(name + ".weight", Initializers.DEFAULT_STD, seed);
    }

    /** Refuses a build without a manager or with a size below 1 (named {@code what}). */
    void checkCommon(String what, int size) {
        if (manager == null) {
            throw new IllegalStateException(name + ": manager(...) is required (it owns the parameters)");
        }
        if (size < 1) {
            throw new IllegalArgumentException(name + ": " + what + " must be at least 1, got " + size);
        }
    }
}
