package io.mcore4j.optimizer;

import static io.mcore4j.optimizer.FlatTensors.own;
import static io.mcore4j.optimizer.FlatTensors.range;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDArrays;
import ai.djl.ndarray.NDList;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.Mcore4j;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.ReduceOp;

import java.util.ArrayList;
import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Data-parallel gradient synchronisation in contiguous buckets, run once per step after the last
 * backward of the schedule (gradients of all micro-batches accumulate in each parameter's
 * {@code .grad} until then).
 *
 * <p>{@link #finishGradSync()} does, in this order:
 * <ol>
 *   <li>sums the gradients of {@link Parameter.Kind#SEQUENCE_PARALLEL} parameters over the
 *       tensor-parallel group, in one coalesced all-reduce;</li>
 *   <li>sums the gradients of the shared (tied) embedding parameters over
 *       {@link ProcessGroups#embedding()} (first and last pipeline stage), in one all-reduce;</li>
 *   <li>copies each bucket's gradients into a flat buffer (float32 unless
 *       {@link OptimizerConfig#gradReduceInFp32()} is off) and averages it with one collective per
 *       bucket over {@link ProcessGroups#dpCp()} (expert parameters: {@link ProcessGroups#expertDp()}):
 *       an all-reduce, or with the distributed optimizer a reduce-scatter that leaves this rank only
 *       its shard.</li>
 * </ol>
 * Steps 1 and 2 are sums and step 3 a mean, so doing the sums first gives Megatron's result
 * (which sums after averaging) and lets the reduce-scatter of step 3 stay the last word on each shard.
 * Without the distributed optimizer the averaged gradient is also written back into every
 * parameter's {@code .grad}; with it, {@code .grad} keeps the local sum and only the shard is reduced.
 *
 * <p><b>Ownership.</b> The synchronised buffers live in a manager that is a child of
 * the parent given to the constructor (by default the first parameter's manager); {@link #zeroGrad()}
 * releases them and zeroes every {@code .grad}. The optimizer reads (and unscales and clips in
 * place) the synchronised buffers between {@link #finishGradSync()} and {@link #zeroGrad()}. All
 * ranks of each group must call {@link #finishGradSync()} together. One instance is used by one thread.
 */
public final class DistributedDataParallel implements AutoCloseable {
    private static final Logger LOG = LoggerFactory.getLogger(DistributedDataParallel.class);

    private final List<Parameter> params;
    private final ProcessGroups groups;
    private final OptimizerConfig config;
    private final List<Parameter> sharedEmbedding;
    private final Set<Parameter> sharedEmbeddingSet;
    private final List<Parameter> sequenceParallel;
    private final List<GradientBucket> buckets;
    private final NDManager manager;
    private final boolean ownsRoot;
    private NDManager syncManager;
    private NDArray[] synced;
    private long syncCount;

    /**
     * Plans the buckets for {@code params}; state lives under the first parameter's manager.
     *
     * @param params this rank's parameters, each once
     * @param groups this rank's groups
     * @param config bucket size, reduction dtype, whether the distributed optimizer shards
     * @param sharedEmbeddingParams parameters tied across the first and last pipeline stage (empty if none)
     * @throws IllegalArgumentException if a parameter repeats, is not floating point, or a shared one is not among {@code params}
     */
    public DistributedDataParallel(List<Parameter> params, ProcessGroups groups, OptimizerConfig config,
                                   List<Parameter> sharedEmbeddingParams) {
        this(params, groups, config, sharedEmbeddingParams, null);
    }

    /**
     * Plans the buckets for {@code params}.
     *
     * @param params this rank's parameters, each once
     * @param groups this rank's groups
     * @param config bucket size, reduction dtype, whether the distributed optimizer shards
     * @param sharedEmbeddingParams parameters tied across the first and last pipeline stage (empty if none)
     * @param parent manager whose child owns the synchronised buffers; null for the first parameter's manager
     */
    public DistributedDataParallel(List<Parameter> params, ProcessGroups groups, OptimizerConfig config,
                                   List<Parameter> sharedEmbeddingParams, NDManager parent) {
        this.params = List.copyOf(params);
        this.groups = Objects.requireNonNull(groups, "groups");
        this.config = Objects.requireNonNull(config, "config");
        this.sharedEmbedding = List.copyOf(sharedEmbeddingParams);
        Set<Parameter> all = Collections.newSetFromMap(new IdentityHashMap<>());
        List<Parameter> sp = new ArrayList<>();
        for (Parameter p : this.params) {
            if (!all.add(p)) {
                throw new IllegalArgumentException("parameter " + p + " is listed twice");
            }
            DataType dtype = p.data().getDataType();
            if (!Tensors.isFloating(dtype)) {
                throw new IllegalArgumentException("parameter " + p + " has dtype " + dtype + "; expected a floating type");
            }
            if (p.kind() == Parameter.Kind.SEQUENCE_PARALLEL) {
                sp.add(p);
            }
        }
        this.sequenceParallel = Collections.unmodifiableList(sp);
        this.sharedEmbeddingSet = Collections.newSetFromMap(new IdentityHashMap<>());
        for (Parameter p : sharedEmbedding) {
            if (!all.contains(p)) {
                throw new IllegalArgumentException("shared embedding parameter " + p + " is not among the parameters");
            }
            sharedEmbeddingSet.add(p);
        }
        this.buckets = GradientBucket.plan(this.params, groups, config);
        this.ownsRoot = parent == null && this.params.isEmpty();
        NDManager base = parent != null ? parent
                : this.params.isEmpty() ? Mcore4j.newRootManager() : this.params.get(0).data().getManager();
        this.manager = ownsRoot ? base : base.newSubManager();
        this.manager.setName("ddp");
        if (LOG.isDebugEnabled()) {
            LOG.debug("rank {}: {} parameters in {} buckets: {}", groups.worldRank(), this.params.size(), buckets.size(), buckets);
        }
    }

    /**
     * Synchronises the accumulated gradients (see the class comment). Every rank of each group
     * involved must call it.
     *
     * @throws IllegalStateException if called twice without {@link #zeroGrad()} in between
     */
    public void finishGradSync() {
        if (synced != null) {
            throw new IllegalStateException("gradients are already synchronised; call zeroGrad() before the next step");
        }
        NDManager owner = manager.newSubManager();
        NDArray[] result = new NDArray[buckets.size()];
        try (NoGrad off = NoGrad.enter(); NDManager temp = owner.newSubManager()) {
            Map<Parameter, NDArray> summed = new IdentityHashMap<>();
            sumAcross(groups.tp(), sequenceParallel, summed, temp);
            sumAcross(groups.embedding(), sharedEmbedding, summed, temp);
            for (GradientBucket bucket : buckets) {
                result[bucket.index] = reduce(bucket, summed, owner, temp);
            }
        } catch (RuntimeException e) {
            owner.close();
            throw e;
        }
        syncManager = owner;
        synced = result;
        syncCount++;
    }

    /** Zeroes every parameter's {@code .grad} and releases the synchronised buffers. */
    public void zeroGrad() {
        for (Parameter p : params) {
            p.zeroGradient();
        }
        releaseSynced();
    }

    /** @return whether {@link #finishGradSync()} ran since the last {@link #zeroGrad()} */
    public boolean isGradSynced() {
        return synced != null;
    }

    /** @return the parameters, in the order given */
    public List<Parameter> parameters() {
        return params;
    }

    /** @return the parameters tied across the first and last pipeline stage */
    public List<Parameter> sharedEmbeddingParameters() {
        return sharedEmbedding;
    }

    /** @return whether gradients are reduce-scattered for the distributed optimizer */
    public boolean usesDistributedOptimizer() {
        return config.useDistributedOptimizer();
    }

    /** @return the configuration */
    public OptimizerConfig config() {
        return config;
    }

    /** @return this rank's groups */
    public ProcessGroups groups() {
        return groups;
    }

    /** @return number of gradient buckets */
    public int bucketCount() {
        return buckets.size();
    }

    /** @return the bucket layouts, in index order */
    List<GradientBucket> buckets() {
        return buckets;
    }

    /** @return whether {@code p} is a shared embedding parameter */
    boolean isSharedEmbedding(Parameter p) {
        return sharedEmbeddingSet.contains(p);
    }

    /**
     * This rank's synchronised gradient shard of a bucket (the whole bucket without the distributed
     * optimizer), 1-D, owned by this object until {@link #zeroGrad()}.
     *
     * @param bucket the bucket index
     * @return the flat shard
     * @throws IllegalStateException before {@link #finishGradSync()}
     */
    NDArray syncedShard(int bucket) {
        if (synced == null) {
            throw new IllegalStateException("gradients are not synchronised: call finishGradSync() after the last backward");
        }
        return synced[bucket];
    }

    /** @return how many times {@link #finishGradSync()} has completed: identifies the current synchronised gradients */
    long syncCount() {
        return syncCount;
    }

    /** @return the manager under which the synchronised buffers live */
    NDManager manager() {
        return manager;
    }

    /** Releases the synchronised buffers (parameters are not touched). */
    @Override
    public void close() {
        releaseSynced();
        manager.close();
    }

    private void releaseSynced() {
        if (syncManager != null) {
            syncManager.close();
            syncManager = null;
        }
        synced = null;
    }

    /** Sums the flattened gradients of {@code members} over {@code group} in one all-reduce. */
    private void sumAcross(Communicator group, List<Parameter> members, Map<Parameter, NDArray> summed, NDManager temp) {
        if (group.size() == 1 || members.isEmpty()) {
            return;
        }
        DataType dtype = reductionDtype(members);
        NDList pieces = new NDList();
        for (Parameter p : members) {
            pieces.add(flatGradient(p, summed, dtype, temp));
        }
        NDArray flat = own(NDArrays.concat(pieces), temp);
        NDArray sum = group.allReduce(flat, ReduceOp.SUM, temp);
        long offset = 0;
        for (Parameter p : members) {
            long n = p.data().getShape().size();
            summed.put(p, range(sum, offset, offset + n, temp));
            offset += n;
        }
    }

    private DataType reductionDtype(List<Parameter> members) {
        DataType first = members.get(0).data().getDataType();
        if (config.gradReduceInFp32()) {
            return DataType.FLOAT32;
        }
        for (Parameter p : members) {
            if (p.data().getDataType() != first) {
                return DataType.FLOAT32;
            }
        }
        return first;
    }

    /** The gradient of {@code p} as a flat tensor of {@code dtype} in {@code temp}: pre-summed, accumulated, or zeros. */
    private static NDArray flatGradient(Parameter p, Map<Parameter, NDArray> summed, DataType dtype, NDManager temp) {
        NDArray g = summed.get(p);
        if (g == null) {
            g = p.gradient(temp);
        }
        if (g == null) {
            return temp.zeros(new Shape(p.data().getShape().size()), dtype);
        }
        return own(own(g.reshape(-1), temp).toType(dtype, false), temp);
    }

    private NDArray reduce(GradientBucket bucket, Map<Parameter, NDArray> summed, NDManager owner, NDManager temp) {
        NDList pieces = new NDList();
        for (GradientBucket.Slot slot : bucket.slots) {
            pieces.add(flatGradient(slot.param(), summed, bucket.gradDtype, temp));
        }
        if (bucket.padding() > 0) {
            pieces.add(temp.zeros(new Shape(bucket.padding()), bucket.gradDtype));
        }
        // a fresh buffer even for a single piece, which may be a view of .grad
        NDArray flat = own(pieces.size() == 1 ? pieces.get(0).duplicate() : NDArrays.concat(pieces), temp);
        Communicator group = bucket.group;
        // the loss is a mean over the global batch, which is split over the DP x CP ranks: every
        // gradient, an expert's too, is divided by that count; expert buckets are only summed over
        // the smaller expert-DP group because the other ranks' tokens already reached the expert
        int dataParallel = groups.dpCp().size();
        NDArray result;
        if (group.size() == 1) {
            if (dataParallel > 1) {
                flat.divi(dataParallel);
            }
            result = own(flat, owner);
        } else {
            boolean average = config.averageInCollective();
            if (!average) {
                flat.divi(dataParallel);
            }
            ReduceOp op = average ? ReduceOp.AVG : ReduceOp.SUM;
            result = config.useDistributedOptimizer()
                    ? group.reduceScatter(flat, 0, op, owner)
                    : group.allReduce(flat, op, owner);
            if (average && group.size() != dataParallel) {
                result.muli((double) group.size() / dataParallel);
            }
        }
        if (!config.useDistributedOptimizer()) {
            for (GradientBucket.Slot slot : bucket.slots) {
                NDArray grad = slot.param().gradient(temp);
                if (grad != null) {
                    NDArray view = range(result, slot.offset(), slot.offset() + slot.numel(), temp);
                    Tensors.copyInto(grad, own(view.reshape(grad.getShape()), temp));
                }
            }
        }
        return result;
    }
}
