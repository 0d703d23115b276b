package io.mcore4j.tensorparallel;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.nn.Module;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.core.shard.ShardedTensor;
import io.mcore4j.parallel.Communicator;

import java.util.List;

/**
 * A word embedding whose {@code [V, h]} table is split along the vocabulary: rank {@code r} of the
 * tensor-parallel group holds rows {@code [r·V/t, (r+1)·V/t)}. Each rank looks up the ids it owns,
 * writes zeros for the others, and the partial embeddings are summed over the group
 * ({@link Mappings#reduceFromTensorParallelRegion}) or, with sequence parallelism,
 * reduce-scattered along the sequence.
 *
 * <p>All communication is over the {@code tp} communicator given to the builder. The layer owns its
 * weight (in the builder's manager), split along dim 0, each rank the main replica of its rows.
 */
public final class VocabParallelEmbedding implements Module {
    private final String name;
    private final int vocabSize;
    private final int hiddenSize;
    private final Communicator tp;
    private final boolean sequenceParallel;
    private final long start;
    private final long end;
    private final Parameter weight;

    private VocabParallelEmbedding(Builder b) {
        this.name = b.name;
        this.vocabSize = b.vocabSize;
        this.hiddenSize = b.hiddenSize;
        this.tp = b.tp;
        this.sequenceParallel = b.sequenceParallel;
        long perRank = vocabSize / tp.size();
        this.start = perRank * tp.rank();
        this.end = start + perRank;
        StridedPartition rows = new StridedPartition(0, tp.rank(), tp.size(), 1);
        this.weight = new Parameter("weight",
                b.weightInitializer().createShard(b.manager, new Shape(vocabSize, hiddenSize), b.dtype, rows),
                new Parameter.Partition(0, tp.rank(), tp.size()), Parameter.Kind.DENSE);
    }

    /**
     * A builder for a table of {@code vocabSize x hiddenSize} split over {@code tp}.
     *
     * @param vocabSize the full (padded, see {@link Vocab#padded}) vocabulary size, divisible by {@code tp.size()}
     * @param hiddenSize the embedding width
     * @param tp the tensor-parallel communicator
     * @return the builder
     */
    public static Builder builder(int vocabSize, int hiddenSize, Communicator tp) {
        return new Builder(vocabSize, hiddenSize, tp);
    }

    /**
     * Looks up the embeddings of {@code tokenIds}.
     *
     * @param scope the pass's scope; owns the output
     * @param tokenIds {@code [s, b]} int32 or int64 ids in {@code [0, V)}; ids this rank does not
     *                 own contribute zeros here and their rows on the owning rank
     * @return {@code [s, b, h]}, or this rank's sequence chunk {@code [s/t, b, h]} with sequence parallelism
     * @throws IllegalArgumentException if the ids are not integers, or with sequence parallelism if
     *         {@code s} is not divisible by the tensor-parallel size
     */
    public NDArray forward(AutogradScope scope, NDArray tokenIds) {
        DataType t = tokenIds.getDataType();
        if (t != DataType.INT32 && t != DataType.INT64) {
            throw new IllegalArgumentException(name + ": token ids must be int32 or int64, got " + t);
        }
        if (sequenceParallel) {
            Mappings.checkSequenceLength(tokenIds.getShape().get(0), tp);
        }
        NDManager owner = scope.manager();
        NDArray partial;
        if (tp.size() == 1) {
            partial = Tensors.embedding(tokenIds, weight.data());
            partial.attach(owner);
        } else {
            NDArray ids;
            NDArray keep;
            try (NDManager temp = owner.newSubManager()) {
                NDArray all = tokenIds.toType(DataType.INT64, true);
                all.attach(temp);
                // number operands as device scalars: a Java number is a synchronising host copy on a GPU
                NDArray first = Tensors.scalar(start, all, temp);
                NDArray inRange = all.gte(first).logicalAnd(all.lt(Tensors.scalar(end, all, temp)));
                inRange.attach(temp);
                ids = all.sub(first).mul(inRange.toType(DataType.INT64, false));
                ids.attach(owner);
                keep = DataTypes.toType(inRange.expandDims(-1), DataTypes.of(weight.data()), false);
                keep.attach(owner);
            }
            NDArray looked = Tensors.embedding(ids, weight.data());
            looked.attach(owner);
            partial = looked.mul(keep);
            partial.attach(owner);
        }
        return sequenceParallel
                ? Mappings.reduceScatterToSequenceParallelRegion(scope, tp, partial)
                : Mappings.reduceFromTensorParallelRegion(scope, tp, partial);
    }

    /** @return this rank's rows {@code [V/t, h]} */
    public Parameter weight() {
        return weight;
    }

    /** @return the full vocabulary size */
    public int vocabSize() {
        return vocabSize;
    }

    /** @return the embedding width */
    public int hiddenSize() {
        return hiddenSize;
    }

    /** @return the first vocabulary id this rank owns */
    public long vocabStart() {
        return start;
    }

    /** @return one past the last vocabulary id this rank owns */
    public long vocabEnd() {
        return end;
    }

    /** @return the weight */
    @Override
    public List<Parameter> parameters() {
        return List.of(weight);
    }

    /**
     * The weight's rows at their offset in the full {@code [V, h]} table, main replica on every rank.
     *
     * @param prefix the module path ending in a dot, or empty
     * @return one description
     */
    @Override
    public List<ShardedTensor> shardedState(String prefix) {
        return new StridedPartition(0, tp.rank(), tp.size(), 1).describe(prefix + weight.name(), weight.data(), null, 0);
    }

    @Override
    public String toString() {
        return name + "{" + vocabSize + " x " + hiddenSize + ", tp " + tp.rank() + "/" + tp.size()
                + ", ids [" + start + ", " + end + ")" + (sequenceParallel ? ", sequence parallel" : "") + "}";
    }

    /** Options of a {@link VocabParallelEmbedding}; {@link #manager} is required. */
    public static final class Builder extends ParallelLayerBuilder<Builder> {
        private final int vocabSize;
        private final int hiddenSize;

        private Builder(int vocabSize, int hiddenSize, Communicator tp) {
            super(tp, "vocab-parallel-embedding");
            this.vocabSize = vocabSize;
            this.hiddenSize = hiddenSize;
        }

        /**
         * Validates the options and creates the weight.
         *
         * @return the layer
         * @throws IllegalArgumentException naming both numbers if the vocabulary size is not
         *         divisible by the tensor-parallel size, or if a size is below 1
         * @throws IllegalStateException if no manager was given
         */
        public VocabParallelEmbedding build() {
            checkCommon("hidden size", hiddenSize);
            try {
                Vocab.perRank(vocabSize, tp.size());
            } catch (IllegalArgumentException e) {
                throw new IllegalArgumentException(name + ": " + e.getMessage(), e);
            }
            return new VocabParallelEmbedding(this);
        }
    }
}
