package io.mcore4j.tensorparallel;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.autograd.NoGrad;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.core.shard.ShardedTensor;
import io.mcore4j.parallel.Communicator;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;

/**
 * A column- or row-parallel linear with a LoRA adapter (PEFT's and Megatron Bridge's semantics):
 * {@code y = base(x) + (alpha / r) · B(A(dropout(x)))}, with {@code A} of shape {@code [r, in]} and
 * {@code B} of {@code [out, r]}, split over the tensor-parallel group so that every rank computes
 * exactly its part of the serial result:
 * <ul>
 * <li>Column-parallel base: {@code A} is replicated, {@code B} is split along its rows like the base
 *     weight ({@code [out/t, r]}, with the base's stride for a fused {@code [gate; up]}). The small
 *     product {@code A·x} ({@code r} columns) enters the tensor-parallel region through
 *     {@link Mappings#copyToTensorParallelRegion} (its gradient is all-reduced in backward, so
 *     {@code A}'s gradient is whole on every rank), or, with sequence parallelism, through
 *     {@link Mappings#gatherFromSequenceParallelRegion} (then {@code A}'s gradient covers this rank's
 *     sequence chunk and is summed over the group: {@link Parameter.Kind#SEQUENCE_PARALLEL}).
 * <li>Row-parallel base: {@code A} is split along its columns like the base weight ({@code [r, in/t]}),
 *     {@code B} is replicated. Each rank's {@code A_local·x_local} is a partial sum of {@code A·x}; it is
 *     reduced over the group <em>before</em> {@code B} (all-reduce, or reduce-scatter along the
 *     sequence with sequence parallelism: {@code r} columns instead of the output's), and
 *     {@code B·(A·x)} is added to the base's reduced output. With sequence parallelism {@code B}'s
 *     gradient covers this rank's chunk and is summed over the group.
 * </ul>
 * Initialisation is PEFT's: {@code A} kaiming-uniform (by default), {@code B} zeros, so an untrained
 * adapter leaves the base output unchanged. Dropout is applied to the adapter's input only, by the
 * {@link InputDropout} the builder was given (identity by default).
 *
 * <p>Parameters: the base's under their own keys, then {@code adapter.linear_in.weight} ({@code A})
 * and {@code adapter.linear_out.weight} ({@code B}), Megatron Bridge's names. The base is not frozen
 * here: a trainer freezes whatever is not an adapter ({@link #isAdapterKey}). The layer owns the
 * base and the adapter and closes both.
 */
public final class LoraLinear implements ParallelLinear {
    /** The key segment of the adapter's parameters: {@code <linear>.adapter.linear_in.weight}. */
    public static final String ADAPTER_PATH = "adapter.";
    /** Key of {@code A} below the linear's prefix. */
    public static final String LINEAR_IN = ADAPTER_PATH + "linear_in.weight";
    /** Key of {@code B} below the linear's prefix. */
    public static final String LINEAR_OUT = ADAPTER_PATH + "linear_out.weight";

    /** Dropout on the adapter's input; it returns its input when it drops nothing. */
    @FunctionalInterface
    public interface InputDropout {
        /** No dropout. */
        InputDropout NONE = (scope, x) -> x;

        /**
         * @param scope the pass's scope; owns the result
         * @param x the adapter's input; the caller still owns it
         * @return {@code x} with dropout applied (possibly {@code x} itself)
         */
        NDArray apply(AutogradScope scope, NDArray x);
    }

    private final ParallelLinear base;
    private final boolean column;
    private final String name;
    private final int rank;
    private final double alpha;
    private final Communicator tp;
    private final boolean sequenceParallel;
    private final StridedPartition outPartition;
    private final InputDropout dropout;
    private final Parameter linearIn;
    private final Parameter linearOut;
    private final NDManager manager;
    private final List<ShardedTensor> stridedPieces = new ArrayList<>();

    private LoraLinear(Builder b) {
        this.base = b.base;
        this.name = b.name;
        this.rank = b.rank;
        this.alpha = b.alpha;
        this.dropout = b.dropout;
        this.manager = b.manager;
        DataType dtype = DataTypes.of(weightOf(base).data());
        if (base instanceof ColumnParallelLinear c) {
            this.column = true;
            this.tp = c.tp();
            this.sequenceParallel = c.sequenceParallel();
            this.outPartition = c.partition();
            Parameter.Kind kind = sequenceParallel ? Parameter.Kind.SEQUENCE_PARALLEL : Parameter.Kind.DENSE;
            this.linearIn = new Parameter("weight", b.initializer.create(manager, new Shape(rank, c.inputSize()), dtype),
                    Parameter.Partition.NONE, kind);
            this.linearOut = new Parameter("weight", Initializers.zeros().createShard(manager,
                    new Shape(c.outputSize(), rank), dtype, outPartition), outPartition.parameterPartition(),
                    Parameter.Kind.DENSE);
        } else {
            RowParallelLinear r = (RowParallelLinear) base;
            this.column = false;
            this.tp = r.tp();
            this.sequenceParallel = r.sequenceParallel();
            this.outPartition = StridedPartition.whole();
            StridedPartition columns = new StridedPartition(1, tp.rank(), tp.size(), 1);
            this.linearIn = new Parameter("weight", b.initializer.createShard(manager, new Shape(rank, r.inputSize()),
                    dtype, columns), columns.parameterPartition(), Parameter.Kind.DENSE);
            this.linearOut = new Parameter("weight", Initializers.zeros().create(manager, new Shape(r.outputSize(), rank),
                    dtype), Parameter.Partition.NONE,
                    sequenceParallel ? Parameter.Kind.SEQUENCE_PARALLEL : Parameter.Kind.DENSE);
        }
        if (outPartition.stride() > 1) {
            stridedPieces.addAll(outPartition.describe(LINEAR_OUT, linearOut.data(), manager, 0));
        }
    }

    /**
     * A builder wrapping {@code base}.
     *
     * @param base a {@link ColumnParallelLinear} (not gathering its output) or a
     *             {@link RowParallelLinear} (with a parallel input); owned by the built layer
     * @return the builder
     */
    public static Builder builder(ParallelLinear base) {
        return new Builder(base);
    }

    /**
     * @param key a parameter's or checkpoint piece's key
     * @return whether it names a LoRA adapter's weight ({@code ...adapter.linear_in.weight} or
     *     {@code ...adapter.linear_out.weight})
     */
    public static boolean isAdapterKey(String key) {
        return key.endsWith("." + LINEAR_IN) || key.endsWith("." + LINEAR_OUT) || key.equals(LINEAR_IN)
                || key.equals(LINEAR_OUT);
    }

    private static Parameter weightOf(ParallelLinear base) {
        if (base instanceof ColumnParallelLinear c) {
            return c.weight();
        }
        return ((RowParallelLinear) base).weight();
    }

    @Override
    public LinearOutput forward(AutogradScope scope, NDArray input) {
        LinearOutput out = base.forward(scope, input);
        NDArray x = dropout.apply(scope, input);
        NDArray h = Tensors.linear(x, linearIn.data(), null, scope.manager());
        NDArray reached;
        if (column) {
            reached = sequenceParallel ? Mappings.gatherFromSequenceParallelRegion(scope, tp, h, true)
                    : Mappings.copyToTensorParallelRegion(scope, tp, h);
        } else {
            reached = sequenceParallel ? Mappings.reduceScatterToSequenceParallelRegion(scope, tp, h)
                    : Mappings.reduceFromTensorParallelRegion(scope, tp, h);
        }
        NDArray delta = Tensors.linear(reached, linearOut.data(), null, scope.manager());
        NDArray scaled = Tensors.scale(delta, scaling(), scope.manager());
        NDArray sum = Tensors.own(out.output().add(scaled), scope.manager());
        scope.release(out.output(), x == input ? null : x, reached == h ? null : h, reached, delta, scaled);
        return new LinearOutput(sum, out.bias());
    }

    /** @return {@code alpha / r}, the factor of the adapter's output */
    public double scaling() {
        return alpha / rank;
    }

    /** @return the adapter's rank {@code r} */
    public int rank() {
        return rank;
    }

    /** @return LoRA's alpha */
    public double alpha() {
        return alpha;
    }

    /** @return the wrapped layer, whose weights this adapter leaves as they are */
    public ParallelLinear base() {
        return base;
    }

    /** @return {@code A}: {@code [r, in]} (column-parallel base) or this rank's {@code [r, in/t]} (row-parallel) */
    public Parameter linearIn() {
        return linearIn;
    }

    /** @return {@code B}: this rank's {@code [out/t, r]} (column-parallel base) or {@code [out, r]} (row-parallel) */
    public Parameter linearOut() {
        return linearOut;
    }

    /**
     * This rank's shard of the merged weight {@code W + (alpha/r)·B·A}: local on every rank, since
     * {@code B}'s rows (column-parallel) or {@code A}'s columns (row-parallel) are split exactly like
     * the base weight. Communicates nothing.
     *
     * @param owner the manager of the result
     * @return a new tensor of the base weight's local shape and dtype
     */
    public NDArray mergedWeight(NDManager owner) {
        NDArray w = weightOf(base).data();
        try (NoGrad ignored = NoGrad.enter(); NDManager temp = owner.newSubManager()) {
            NDArray delta = linearOut.data().toType(DataType.FLOAT32, true).matMul(linearIn.data().toType(DataType.FLOAT32, true));
            NDArray merged = w.toType(DataType.FLOAT32, true).add(delta.mul(scaling()));
            NDArray out = DataTypes.toType(merged, DataTypes.of(w), true);
            out.attach(owner);
            return out;
        }
    }

    /**
     * Merges the adapter into the base weight in place (PEFT's {@code merge_and_unload}):
     * {@code W ← W + (alpha/r)·B·A} ({@link #mergedWeight}) and {@code B ← 0}, so the layer computes
     * the same function afterwards and a second merge adds nothing. Local; communicates nothing.
     */
    public void merge() {
        try (NDManager temp = manager.newSubManager()) {
            Tensors.copyInto(weightOf(base).data(), mergedWeight(temp));
            Tensors.copyInto(linearOut.data(), DataTypes.zeros(temp, linearOut.data().getShape(), DataTypes.of(linearOut.data())));
        }
    }

    /**
     * {@link #merge() Merges} every adapter below {@code root} (children of
     * {@link io.mcore4j.core.nn.AbstractModule}s, walked depth first).
     *
     * @param root a model or part of one
     * @return the number of adapters merged
     */
    public static int mergeAll(io.mcore4j.core.nn.Module root) {
        if (root instanceof LoraLinear lora) {
            lora.merge();
            return 1;
        }
        int merged = 0;
        if (root instanceof io.mcore4j.core.nn.AbstractModule m) {
            for (io.mcore4j.core.nn.Module child : m.children()) {
                merged += mergeAll(child);
            }
        }
        return merged;
    }

    /** @return the base's parameters, then {@code A} and {@code B} */
    @Override
    public List<Parameter> parameters() {
        List<Parameter> out = new ArrayList<>(base.parameters());
        out.add(linearIn);
        out.add(linearOut);
        return out;
    }

    @Override
    public Map<String, Parameter> namedParameters(String prefix) {
        Map<String, Parameter> out = new LinkedHashMap<>(base.namedParameters(prefix));
        out.put(prefix + LINEAR_IN, linearIn);
        out.put(prefix + LINEAR_OUT, linearOut);
        return out;
    }

    /**
     * The base's pieces, then {@code A}'s and {@code B}'s: the split one at its place in the full
     * adapter weight (main replica on every rank), the replicated one main on tensor-parallel rank 0.
     *
     * @param prefix the module path ending in a dot, or empty
     * @return never null
     */
    @Override
    public List<ShardedTensor> shardedState(String prefix) {
        List<ShardedTensor> out = new ArrayList<>(base.shardedState(prefix));
        if (column) {
            out.add(StridedPartition.replicated(prefix + LINEAR_IN, linearIn.data(), tp.rank()));
            if (outPartition.stride() > 1) {
                for (ShardedTensor t : stridedPieces) {
                    out.add(t.withPrefix(prefix));
                }
            } else {
                out.addAll(outPartition.describe(prefix + LINEAR_OUT, linearOut.data(), manager, 0));
            }
        } else {
            out.addAll(new StridedPartition(1, tp.rank(), tp.size(), 1).describe(prefix + LINEAR_IN, linearIn.data(),
                    manager, 0));
            out.add(StridedPartition.replicated(prefix + LINEAR_OUT, linearOut.data(), tp.rank()));
        }
        return out;
    }

    /** Closes the base, the adapter and the views kept for checkpoint pieces. */
    @Override
    public void close() {
        for (ShardedTensor t : stridedPieces) {
            t.data().close();
        }
        base.close();
        linearIn.close();
        linearOut.close();
    }

    @Override
    public String toString() {
        return name + "{lora r=" + rank + ", alpha=" + alpha + " on " + base + "}";
    }

    /** Options of a {@link LoraLinear}; {@link #rank}, {@link #alpha} and {@link #manager} are required. */
    public static final class Builder {
        private final ParallelLinear base;
        private int rank;
        private double alpha = Double.NaN;
        private InputDropout dropout = InputDropout.NONE;
        private Initializer initializer;
        private NDManager manager;
        private String name = "lora";

        private Builder(ParallelLinear base) {
            this.base = Objects.requireNonNull(base, "base");
        }

        /** @param value the adapter's rank {@code r}, at least 1 @return this */
        public Builder rank(int value) {
            this.rank = value;
            return this;
        }

        /** @param value LoRA's alpha: the adapter's output is scaled by {@code alpha / r} @return this */
        public Builder alpha(double value) {
            this.alpha = value;
            return this;
        }

        /** @param value dropout on the adapter's input (default none) @return this */
        public Builder dropout(InputDropout value) {
            this.dropout = Objects.requireNonNull(value, "dropout");
            return this;
        }

        /**
         * @param value how the full {@code A} is created, identically on every rank (required;
         *              PEFT's is {@link Initializers#kaimingUniform}) @return this
         */
        public Builder initializer(Initializer value) {
            this.initializer = Objects.requireNonNull(value, "initializer");
            return this;
        }

        /** @param value the manager that owns the adapter's parameters (required) @return this */
        public Builder manager(NDManager value) {
            this.manager = Objects.requireNonNull(value, "manager");
            return this;
        }

        /** @param value the layer's name in messages @return this */
        public Builder name(String value) {
            this.name = Objects.requireNonNull(value, "name");
            return this;
        }

        /**
         * Validates the options and creates the adapter.
         *
         * @return the layer
         * @throws IllegalArgumentException if the rank is below 1, alpha is not a positive number, or
         *         the base is not a column-parallel linear without gathered output or a row-parallel
         *         one with a parallel input
         * @throws IllegalStateException if no manager or initializer was given
         */
        public LoraLinear build() {
            if (rank < 1) {
                throw new IllegalArgumentException(name + ": LoRA rank must be at least 1, got " + rank);
            }
            if (!(alpha > 0) || Double.isInfinite(alpha)) {
                throw new IllegalArgumentException(name + ": LoRA alpha must be a positive number, got " + alpha);
            }
            if (manager == null) {
                throw new IllegalStateException(name + ": manager(...) is required (it owns the adapter)");
            }
            if (initializer == null) {
                throw new IllegalStateException(name + ": initializer(...) is required (it creates A)");
            }
            if (base instanceof ColumnParallelLinear c) {
                if (c.gatherOutput()) {
                    throw new IllegalArgumentException(name + ": a LoRA adapter needs a column-parallel base without"
                            + " gatherOutput");
                }
                if (c.weight() == null) {
                    throw new IllegalArgumentException(name + ": a LoRA adapter needs a base with its own weight");
                }
            } else if (base instanceof RowParallelLinear r) {
                if (!r.inputIsParallel()) {
                    throw new IllegalArgumentException(name + ": a LoRA adapter needs a row-parallel base with"
                            + " inputIsParallel(true)");
                }
            } else {
                throw new IllegalArgumentException(name + ": LoRA wraps a ColumnParallelLinear or a RowParallelLinear,"
                        + " not " + base.getClass().getSimpleName());
            }
            return new LoraLinear(this);
        }
    }
}
