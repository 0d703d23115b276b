package io.mcore4j.optimizer;

import ai.djl.ndarray.types.DataType;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.ProcessGroups;

import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.function.Predicate;

/**
 * The layout of one gradient bucket: which parameters it holds at which offsets of its flat
 * buffer, over which group it is reduced, and which contiguous range of it (the shard) this rank
 * owns. The buffer is padded to a multiple of the group size so that it splits evenly; without the
 * distributed optimizer the shard is the whole padded buffer.
 *
 * <p>A bucket is uniform: all its parameters share the reduction group, the dtype, whether weight
 * decay applies ({@link UpdateRule#decays}) and whether their gradients count in the global norm
 * on this rank ({@link GradientNorm#counts}), so the optimizer treats a bucket as one tensor and
 * needs no per-element masks.
 */
final class GradientBucket {

    /**
     * One parameter's place in the flat buffer.
     *
     * @param param the parameter
     * @param offset first element in the bucket
     * @param numel number of elements
     */
    record Slot(Parameter param, long offset, long numel) {}

    /**
     * What the parameters of one bucket have in common. Every field is identical on every rank of
     * the bucket's reduction group (those ranks differ only in their data-parallel coordinate), so
     * all of them plan the same buckets in the same order.
     *
     * @param expert reduced over expert-dp instead of dp-cp
     * @param dtype the parameters' dtype
     * @param decays whether weight decay applies
     * @param countedOnModelParallelRank {@link GradientNorm#countsOnModelParallelRank}
     */
    private record Kind(boolean expert, DataType dtype, boolean decays, boolean countedOnModelParallelRank) {}

    final int index;
    final Communicator group;
    final boolean expert;
    final DataType paramDtype;
    final DataType gradDtype;
    /** Whether weight decay applies to every parameter of the bucket (else to none). */
    final boolean decays;
    /** Whether this rank counts every gradient element of the bucket in the global norm (else none). */
    final boolean countsInNorm;
    final List<Slot> slots;
    final long numel;
    final long paddedNumel;
    final long shardOffset;
    final long shardNumel;

    private GradientBucket(int index, Communicator group, Kind kind, DataType gradDtype, boolean countsInNorm,
                           List<Slot> slots, boolean sharded) {
        this.index = index;
        this.group = group;
        this.expert = kind.expert();
        this.paramDtype = kind.dtype();
        this.gradDtype = gradDtype;
        this.decays = kind.decays();
        this.countsInNorm = countsInNorm;
        this.slots = Collections.unmodifiableList(slots);
        Slot last = slots.get(slots.size() - 1);
        this.numel = last.offset() + last.numel();
        int parts = group.size();
        this.paddedNumel = (numel + parts - 1) / parts * parts;
        this.shardNumel = sharded ? paddedNumel / parts : paddedNumel;
        this.shardOffset = sharded ? shardNumel * group.rank() : 0;
    }

    /** @return padding elements at the end of the buffer */
    long padding() {
        return paddedNumel - numel;
    }

    /**
     * Splits {@code params} into buckets. Parameters are grouped by reduction group (dense over
     * dp-cp, experts over expert-dp), dtype, whether they decay ({@link UpdateRule#decays}) and
     * whether this rank counts them in the gradient norm ({@link GradientNorm#counts}, with the
     * gradients data-parallel replicas unless the distributed optimizer shards them). Within a
     * group they are taken in reverse order (the order backward produces their gradients), and a
     * bucket is closed once it holds at least {@code bucketSizeBytes}. Groups follow each other
     * in the order of their first parameter in {@code params}.
     *
     * @param params the parameters, each once
     * @param groups this rank's groups
     * @param config bucket size, reduction dtype, sharding
     * @param sharedEmbedding whether a parameter is tied across the first and last pipeline stage
     * @return the buckets, indexed in order; never null, empty when no parameter has an element
     */
    static List<GradientBucket> plan(List<Parameter> params, ProcessGroups groups, OptimizerConfig config,
                                     Predicate<Parameter> sharedEmbedding) {
        Map<Kind, List<Parameter>> byKind = new LinkedHashMap<>();
        for (Parameter p : params) {
            // grouping by the full norm predicate would give data-parallel rank 0 other buckets
            // than its peers; its data-parallel factor is the same for the whole group anyway
            Kind kind = new Kind(p.kind() == Parameter.Kind.EXPERT, DataTypes.of(p.data()), UpdateRule.decays(p),
                    GradientNorm.countsOnModelParallelRank(p, sharedEmbedding.test(p), groups));
            byKind.computeIfAbsent(kind, k -> new ArrayList<>()).add(p);
        }
        boolean replicas = !config.useDistributedOptimizer();
        List<GradientBucket> buckets = new ArrayList<>();
        for (Map.Entry<Kind, List<Parameter>> entry : byKind.entrySet()) {
            Kind kind = entry.getKey();
            List<Parameter> members = entry.getValue();
            Communicator group = kind.expert() ? groups.expertDp() : groups.dpCp();
            DataType gradDtype = config.gradReduceInFp32() ? DataType.FLOAT32 : kind.dtype();
            Parameter first = members.get(0);
            boolean counted = GradientNorm.counts(first, sharedEmbedding.test(first), replicas, groups);
            List<Slot> slots = new ArrayList<>();
            long offset = 0;
            for (int i = members.size() - 1; i >= 0; i--) {
                Parameter p = members.get(i);
                long n = p.data().getShape().size();
                if (n == 0) {
                    continue;
                }
                slots.add(new Slot(p, offset, n));
                offset += n;
                if (offset * gradDtype.getNumOfBytes() >= config.bucketSizeBytes()) {
                    buckets.add(new GradientBucket(buckets.size(), group, kind, gradDtype, counted, slots,
                            config.useDistributedOptimizer()));
                    slots = new ArrayList<>();
                    offset = 0;
                }
            }
            if (!slots.isEmpty()) {
                buckets.add(new GradientBucket(buckets.size(), group, kind, gradDtype, counted, slots,
                        config.useDistributedOptimizer()));
            }
        }
        return Collections.unmodifiableList(buckets);
    }

    @Override
    public String toString() {
        return "GradientBucket{" + index + ", " + group.group().key() + ", " + paramDtype + (decays ? ", decays" : "")
                + (countsInNorm ? ", counted" : "") + ", " + slots.size() + " params, " + numel
                + " elements (+" + padding() + " padding), shard [" + shardOffset + ", " + (shardOffset + shardNumel) + ")}";
    }
}
