package io.mcore4j.optimizer;

import ai.djl.ndarray.types.DataType;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.ProcessGroups;

import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The layout of one gradient bucket: which parameters it holds at which offsets of its flat
 * buffer, over which group it is reduced, and which contiguous range of it (the shard) this rank
 * owns. The buffer is padded to a multiple of the group size so that it splits evenly; without the
 * distributed optimizer the shard is the whole padded buffer.
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

    final int index;
    final Communicator group;
    final boolean expert;
    final DataType paramDtype;
    final DataType gradDtype;
    final List<Slot> slots;
    final long numel;
    final long paddedNumel;
    final long shardOffset;
    final long shardNumel;

    private GradientBucket(int index, Communicator group, boolean expert, DataType paramDtype, DataType gradDtype,
                           List<Slot> slots, boolean sharded) {
        this.index = index;
        this.group = group;
        this.expert = expert;
        this.paramDtype = paramDtype;
        this.gradDtype = gradDtype;
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
     * Splits {@code params} into buckets: parameters are grouped by reduction group (dense over
     * dp-cp, experts over expert-dp) and dtype, taken in reverse order (the order backward produces
     * their gradients), and a bucket is closed once it holds at least {@code bucketSizeBytes}.
     *
     * @param params the parameters, each once
     * @param groups this rank's groups
     * @param config bucket size, reduction dtype, sharding
     * @return the buckets, indexed in order
     */
    static List<GradientBucket> plan(List<Parameter> params, ProcessGroups groups, OptimizerConfig config) {
        Map<String, List<Parameter>> byKind = new LinkedHashMap<>();
        for (Parameter p : params) {
            boolean expert = p.kind() == Parameter.Kind.EXPERT;
            byKind.computeIfAbsent((expert ? "expert:" : "dense:") + p.data().getDataType(), k -> new ArrayList<>()).add(p);
        }
        List<GradientBucket> buckets = new ArrayList<>();
        for (List<Parameter> members : byKind.values()) {
            boolean expert = members.get(0).kind() == Parameter.Kind.EXPERT;
            Communicator group = expert ? groups.expertDp() : groups.dpCp();
            DataType paramDtype = members.get(0).data().getDataType();
            DataType gradDtype = config.gradReduceInFp32() ? DataType.FLOAT32 : paramDtype;
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
                    buckets.add(new GradientBucket(buckets.size(), group, expert, paramDtype, gradDtype, slots,
                            config.useDistributedOptimizer()));
                    slots = new ArrayList<>();
                    offset = 0;
                }
            }
            if (!slots.isEmpty()) {
                buckets.add(new GradientBucket(buckets.size(), group, expert, paramDtype, gradDtype, slots,
                        config.useDistributedOptimizer()));
            }
        }
        return Collections.unmodifiableList(buckets);
    }

    @Override
    public String toString() {
        return "GradientBucket{" + index + ", " + group.group().key() + ", " + slots.size() + " params, " + numel
                + " elements (+" + padding() + " padding), shard [" + shardOffset + ", " + (shardOffset + shardNumel) + ")}";
    }
}
