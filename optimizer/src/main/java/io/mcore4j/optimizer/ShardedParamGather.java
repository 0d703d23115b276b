package io.mcore4j.optimizer;

import static io.mcore4j.core.Tensors.own;
import static io.mcore4j.optimizer.FlatTensors.range;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.TensorMemory;
import io.mcore4j.core.autograd.NoGrad;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.core.nn.ParameterResidency;
import io.mcore4j.parallel.PendingCollective;

import java.util.ArrayList;
import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * Megatron FSDP's {@code optim_grads_params} (ZeRO-3): a bucket's parameters hold their values only
 * while the model reads them. Before a read ({@link #beforeForward}: the forward's, and the rerun in
 * backward of a recomputed layer) the bucket's weights are all-gathered over its data-parallel group
 * from this rank's master shard (cast to the parameters' dtype) into one flat buffer, and each parameter
 * is made a view of it in place ({@link TensorMemory#shareStorage}: the same leaf, no copy). Once every
 * parameter of the bucket has been named to {@link #afterUse} since that gather, each parameter is
 * emptied ({@link TensorMemory#releaseStorage}) and the buffer's memory goes back to the allocator.
 * Buckets of one rank ({@code group.size() == 1}) are never released, nor buckets holding a parameter
 * the model never names to {@link #afterUse} (the embedding's and the head's). A step's new weights
 * ({@link #publish}) release every gathered bucket; the next read gathers the new values.
 *
 * <p><b>Prefetch.</b> The buckets are gathered in the same order every step (the forward's layers, then
 * the backward's reruns in reverse). The order of the last step is kept, and while this step follows it,
 * a read that gathered k buckets then starts the all-gathers of the next k buckets of that order
 * ({@link io.mcore4j.parallel.Communicator#startAllGather}, on a second stream with NCCL): the next
 * layer's, which run while this layer computes; the next read waits for them. Once the step departs from
 * the recorded order (a checkpoint's {@link #finish()}, another number of micro-batches) it prefetches no
 * more until the next step. About two layers' gathered weights live at once.
 *
 * <p>The parameters start whole (as built, loaded or written before the first read). {@link #finish()}
 * gathers every bucket, for whatever reads the weights without naming them (a checkpoint, evaluation,
 * the end of training). The first read after either releases every bucket it does not read, so that
 * whole weights do not outlive the loads and saves that needed them. {@link #beforeStep()} gathers nothing, since the
 * step reads only master shards, and drops a prefetch left over. The collectives are issued in the order
 * the model reads, the same on every rank of each group. Used by one thread.
 */
final class ShardedParamGather implements ParamGather, ParameterResidency {

    /** This rank's shard of a bucket's weights. */
    @FunctionalInterface
    interface ShardSource {
        /**
         * @param bucket the bucket
         * @param owner owner of the shard if it is a new tensor
         * @return this rank's shard of the bucket's current weights, 1-D, in the parameters' dtype and on their device
         */
        NDArray shard(GradientBucket bucket, NDManager owner);
    }

    private final List<GradientBucket> buckets;
    private final ShardSource source;
    private final Map<Parameter, GradientBucket> bucketOf = new IdentityHashMap<>();
    /** Each parameter's shape, which its tensor loses while released. */
    private final Map<Parameter, Shape> shapes = new IdentityHashMap<>();
    /** Per bucket, the manager of its gathered buffer while its parameters are views of it, else null. */
    private final NDManager[] gathered;
    /** Per bucket, the parameters named to afterUse since its last gather. */
    private final List<Set<Parameter>> used = new ArrayList<>();
    private final NDManager manager;
    private long gathers;
    private long prefetches;
    /** Per bucket, its all-gather started ahead of its read, or null. */
    private final Prefetch[] prefetched;
    /** The buckets gathered in the last step, in order, and in this one so far. */
    private List<Integer> lastOrder = List.of();
    private List<Integer> order = new ArrayList<>();
    /** Whether this step has gathered as the last one did so far (and may prefetch). */
    private boolean onTrack = true;
    /**
     * Whether every bucket is whole because nothing has read since the start or since {@link #finish()}:
     * the next read then releases all the others at once rather than one by one as they are used (the
     * embedding's and the head's would otherwise stay whole until the step's new weights).
     */
    private boolean releaseUnread = true;

    /** A started all-gather: the manager of its result, the one of its input, the collective. */
    private record Prefetch(NDManager owner, NDManager input, PendingCollective pending) {}

    /**
     * @param buckets the wrapper's buckets; their parameters are whole (gathered) now
     * @param source this rank's shards
     * @param parent parent of the gathered buffers' managers
     */
    ShardedParamGather(List<GradientBucket> buckets, ShardSource source, NDManager parent) {
        this.buckets = buckets;
        this.source = source;
        this.gathered = new NDManager[buckets.size()];
        this.prefetched = new Prefetch[buckets.size()];
        this.manager = parent.newSubManager();
        this.manager.setName("zero3-gathered");
        for (GradientBucket bucket : buckets) {
            for (GradientBucket.Slot slot : bucket.slots) {
                bucketOf.put(slot.param(), bucket);
                shapes.put(slot.param(), slot.param().data().getShape());
            }
            used.add(Collections.newSetFromMap(new IdentityHashMap<>()));
            // the parameters hold their values now: as if gathered, released after their first use
            gathered[bucket.index] = manager.newSubManager();
        }
    }

    @Override
    public void publish(GradientBucket bucket, NDArray local, NDManager buffers) {
        buffers.close(); // the next read gathers from the master shard itself
        release(bucket);
    }

    @Override
    public void beforeForward(List<Parameter> parameters) {
        if (releaseUnread) {
            releaseUnread = false;
            releaseAllBut(parameters);
        }
        int count = 0;
        for (Parameter p : parameters) {
            GradientBucket bucket = bucketOf.get(p);
            if (bucket != null && gathered[bucket.index] == null) {
                gather(bucket);
                count++;
            }
        }
        prefetch(count);
    }

    @Override
    public void afterUse(List<Parameter> parameters) {
        for (Parameter p : parameters) {
            GradientBucket bucket = bucketOf.get(p);
            if (bucket == null || gathered[bucket.index] == null || bucket.group.size() == 1) {
                continue;
            }
            Set<Parameter> done = used.get(bucket.index);
            done.add(p);
            if (done.size() == bucket.slots.size()) {
                release(bucket);
            }
        }
    }

    /** Gathers nothing (the step reads the master shards only); drops prefetches and starts a new order. */
    @Override
    public void beforeStep() {
        for (GradientBucket bucket : buckets) {
            Prefetch f = prefetched[bucket.index];
            if (f != null) {
                prefetched[bucket.index] = null;
                try (NDManager owner = f.owner(); NDManager input = f.input()) {
                    f.pending().await(); // never leave a collective running on released buffers
                }
            }
        }
        lastOrder = order;
        order = new ArrayList<>();
        onTrack = true;
    }

    @Override
    public void finish() {
        for (GradientBucket bucket : buckets) {
            if (gathered[bucket.index] == null) {
                gather(bucket);
            }
        }
        releaseUnread = true;
    }

    /** Releases every gathered bucket that holds none of {@code parameters}. */
    private void releaseAllBut(List<Parameter> parameters) {
        Set<GradientBucket> read = Collections.newSetFromMap(new IdentityHashMap<>());
        for (Parameter p : parameters) {
            GradientBucket bucket = bucketOf.get(p);
            if (bucket != null) {
                read.add(bucket);
            }
        }
        for (GradientBucket bucket : buckets) {
            if (!read.contains(bucket)) {
                release(bucket);
            }
        }
    }

    /** @return how many all-gathers ran so far */
    long gathers() {
        return gathers;
    }

    /** @return how many all-gathers were started ahead of their read so far */
    long prefetches() {
        return prefetches;
    }

    private void gather(GradientBucket bucket) {
        Prefetch ahead = prefetched[bucket.index];
        prefetched[bucket.index] = null;
        NDManager owner = ahead != null ? ahead.owner() : manager.newSubManager();
        try (NoGrad off = NoGrad.enter(); NDManager temp = manager.newSubManager()) {
            NDArray full;
            if (ahead != null) {
                try (NDManager input = ahead.input()) {
                    full = ahead.pending().await();
                }
            } else {
                full = bucket.group.allGather(source.shard(bucket, temp), 0, owner);
            }
            List<NDArray> targets = new ArrayList<>(bucket.slots.size());
            List<NDArray> views = new ArrayList<>(bucket.slots.size());
            for (GradientBucket.Slot slot : bucket.slots) {
                targets.add(slot.param().data());
                views.add(own(range(full, slot.offset(), slot.offset() + slot.numel(), temp)
                        .reshape(shapes.get(slot.param())), temp));
            }
            TensorMemory.shareStorage(targets, views);
        } catch (RuntimeException e) {
            owner.close();
            throw e;
        }
        gathered[bucket.index] = owner;
        used.get(bucket.index).clear();
        gathers++;
        int i = order.size();
        order.add(bucket.index);
        onTrack &= i < lastOrder.size() && lastOrder.get(i) == bucket.index;
    }

    /**
     * While this step follows the last one's order, starts the gathers of the next {@code count} buckets
     * that order names (those not gathered or started already): the next read's, as many as this read gathered.
     */
    private void prefetch(int count) {
        for (int j = order.size(); onTrack && j < Math.min(order.size() + count, lastOrder.size()); j++) {
            GradientBucket next = buckets.get(lastOrder.get(j));
            if (gathered[next.index] != null || prefetched[next.index] != null || next.group.size() == 1) {
                continue;
            }
            NDManager owner = manager.newSubManager();
            NDManager input = manager.newSubManager();
            try (NoGrad off = NoGrad.enter()) {
                prefetched[next.index] = new Prefetch(owner, input, next.group.startAllGather(source.shard(next, input), owner));
                prefetches++;
            } catch (RuntimeException e) {
                owner.close();
                input.close();
                throw e;
            }
        }
    }

    private void release(GradientBucket bucket) {
        NDManager owner = gathered[bucket.index];
        if (owner == null || bucket.group.size() == 1) {
            return;
        }
        List<NDArray> targets = new ArrayList<>(bucket.slots.size());
        for (GradientBucket.Slot slot : bucket.slots) {
            targets.add(slot.param().data());
        }
        try (NoGrad off = NoGrad.enter()) {
            TensorMemory.releaseStorage(targets);
        }
        owner.close();
        gathered[bucket.index] = null;
        used.get(bucket.index).clear();
    }
}
