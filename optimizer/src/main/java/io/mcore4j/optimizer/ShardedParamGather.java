package io.mcore4j.optimizer;

import static io.mcore4j.core.Tensors.own;
import static io.mcore4j.optimizer.FlatTensors.range;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.TensorMemory;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.NoGrad;
import io.mcore4j.core.kernel.Kernels;
import io.mcore4j.core.kernel.StorageResize;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.core.nn.ParameterResidency;
import io.mcore4j.parallel.PendingCollective;

import java.util.ArrayList;
import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.function.Function;

/**
 * Megatron FSDP's {@code optim_grads_params} (ZeRO-3): a bucket's parameters hold their values only
 * while the model reads them. Before a read ({@link #beforeForward}: the forward's, the backward's of a layer
 * that kept its graph, and the rerun in backward of a recomputed layer) the bucket's weights are all-gathered
 * over its data-parallel group from this rank's master shard (cast to the parameters' dtype). Once every
 * parameter of the bucket has been named to {@link #afterUse} since that gather, the bucket is released.
 * Where the values go, and how they leave, is one of two residences, chosen once:
 * <ul>
 *   <li><b>Resized storage</b>, where the device has a {@link StorageResize} (mcore4j's native library on a
 *       CUDA device): each bucket's parameters are views of one flat buffer for good. A release frees the
 *       buffer's memory without touching the parameters, a gather gives it memory again and all-gathers into
 *       it. A graph that saved a parameter stays valid (nothing moves its version), so layers need not be
 *       recomputed: {@link #keepsSavedTensors()}.</li>
 *   <li><b>Views</b>, elsewhere: a gather makes each parameter a view of a new buffer in place
 *       ({@link TensorMemory#shareStorage}: the same leaf, no copy), a release empties each parameter
 *       ({@link TensorMemory#releaseStorage}). Both move the parameters' versions, so the model must recompute
 *       every layer whose parameters it releases.</li>
 * </ul>
 * Buckets of one rank ({@code group.size() == 1}) are never released, nor buckets holding a parameter
 * the model never names to {@link #afterUse} (the embedding's and the head's). A step's new weights
 * ({@link #publish}) release every gathered bucket; the next read gathers the new values.
 *
 * <p><b>Prefetch.</b> The buckets are gathered in the same order every step (the forward's layers, then
 * the backward's in reverse). The order of the last step is kept, and while this step follows it,
 * a read that gathered k buckets then keeps the all-gathers of the next {@value #READS_AHEAD} k buckets of that
 * order started ({@link io.mcore4j.parallel.Communicator#startAllGather}, on a second stream with NCCL): the
 * next two layers', which run while this layer computes; a read waits for its own. Two layers ahead rather
 * than one, because every all-gather meets the other ranks: a rank whose host fell behind by up to a layer
 * (the forward of a small model is queued by the host about as fast as the device runs it) then delays no
 * other rank's read. Once the step departs from the recorded order (a checkpoint's {@link #finish()}, another
 * number of micro-batches) it prefetches no more until the next step. About three layers' gathered weights
 * live at once. A parameter named to {@link #beforeForward} is in use again until named to {@link #afterUse}.
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
    private final Residence residence;
    private final Map<Parameter, GradientBucket> bucketOf = new IdentityHashMap<>();
    /** Per bucket, whether its parameters hold the gathered values now. */
    private final boolean[] resident;
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

    /** How many reads' worth of buckets are kept started ahead of the current one. */
    static final int READS_AHEAD = 2;

    /** A started all-gather: the manager of its input (this rank's shard), the collective. */
    private record Prefetch(NDManager input, PendingCollective pending) {}

    /**
     * With the device's {@link StorageResize} where it has one ({@link Kernels#find}), else with views.
     *
     * @param buckets the wrapper's buckets; their parameters are whole (gathered) now
     * @param source this rank's shards
     * @param parent parent of the gathered buffers' managers
     */
    ShardedParamGather(List<GradientBucket> buckets, ShardSource source, NDManager parent) {
        this(buckets, source, parent, buckets.isEmpty() ? null
                : Kernels.find(StorageResize.class, buckets.get(0).slots.get(0).param().data().getDevice()).orElse(null));
    }

    /**
     * @param buckets the wrapper's buckets; their parameters are whole (gathered) now
     * @param source this rank's shards
     * @param parent parent of the gathered buffers' managers
     * @param resize frees and refills the buckets' buffers in place, or null to make the parameters views of
     *     each gather's buffer
     */
    ShardedParamGather(List<GradientBucket> buckets, ShardSource source, NDManager parent, StorageResize resize) {
        this.buckets = buckets;
        this.source = source;
        this.resident = new boolean[buckets.size()];
        this.prefetched = new Prefetch[buckets.size()];
        this.manager = parent.newSubManager();
        this.manager.setName("zero3-gathered");
        for (GradientBucket bucket : buckets) {
            for (GradientBucket.Slot slot : bucket.slots) {
                bucketOf.put(slot.param(), bucket);
            }
            used.add(Collections.newSetFromMap(new IdentityHashMap<>()));
            // the parameters hold their values now: as if gathered, released after their first use
            resident[bucket.index] = true;
        }
        this.residence = resize != null ? new ResizedStorage(buckets, resize, manager) : new Views(buckets, manager);
    }

    /** {@inheritDoc} With a {@link StorageResize}: a release leaves the parameters' versions as they were. */
    @Override
    public boolean keepsSavedTensors() {
        return residence instanceof ResizedStorage;
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
            if (bucket == null) {
                continue;
            }
            if (!resident[bucket.index]) {
                gather(bucket);
                count++;
            } else {
                used.get(bucket.index).remove(p); // read again: in use until its next afterUse
            }
        }
        prefetch(READS_AHEAD * count);
    }

    @Override
    public void afterUse(List<Parameter> parameters) {
        for (Parameter p : parameters) {
            GradientBucket bucket = bucketOf.get(p);
            if (bucket == null || !resident[bucket.index] || bucket.group.size() == 1) {
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
                try (NDManager input = f.input()) {
                    // never leave a collective running on released buffers
                    residence.discard(bucket, f.pending().await());
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
            if (!resident[bucket.index]) {
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
        try (NoGrad off = NoGrad.enter()) {
            if (ahead != null) {
                try (NDManager input = ahead.input()) {
                    residence.land(bucket, ahead.pending().await());
                }
            } else {
                try (NDManager temp = manager.newSubManager()) {
                    residence.gather(bucket, source.shard(bucket, temp));
                }
            }
        }
        resident[bucket.index] = true;
        used.get(bucket.index).clear();
        gathers++;
        int i = order.size();
        order.add(bucket.index);
        onTrack &= i < lastOrder.size() && lastOrder.get(i) == bucket.index;
    }

    /**
     * While this step follows the last one's order, starts the gathers of the next {@code count} buckets
     * that order names (those not gathered or started already): the next reads', {@link #READS_AHEAD} times as
     * many as this read gathered.
     */
    private void prefetch(int count) {
        for (int j = order.size(); onTrack && j < Math.min(order.size() + count, lastOrder.size()); j++) {
            GradientBucket next = buckets.get(lastOrder.get(j));
            if (resident[next.index] || prefetched[next.index] != null || next.group.size() == 1) {
                continue;
            }
            NDManager input = manager.newSubManager();
            try (NoGrad off = NoGrad.enter()) {
                prefetched[next.index] = new Prefetch(input, residence.start(next, source.shard(next, input)));
                prefetches++;
            } catch (RuntimeException e) {
                input.close();
                throw e;
            }
        }
    }

    private void release(GradientBucket bucket) {
        if (!resident[bucket.index] || bucket.group.size() == 1) {
            return;
        }
        try (NoGrad off = NoGrad.enter()) {
            residence.release(bucket);
        }
        resident[bucket.index] = false;
        used.get(bucket.index).clear();
    }

    /** @return the bucket's parameters' tensors, in slot order */
    private static List<NDArray> weights(GradientBucket bucket) {
        List<NDArray> weights = new ArrayList<>(bucket.slots.size());
        for (GradientBucket.Slot slot : bucket.slots) {
            weights.add(slot.param().data());
        }
        return weights;
    }

    /** @return per slot, in order, a view of its range of the bucket's flat {@code full} in the shape {@code shape} gives */
    private static List<NDArray> slotViews(GradientBucket bucket, NDArray full, Function<Parameter, Shape> shape,
                                           NDManager temp) {
        List<NDArray> views = new ArrayList<>(bucket.slots.size());
        for (GradientBucket.Slot slot : bucket.slots) {
            NDArray range = range(full, slot.offset(), slot.offset() + slot.numel(), temp);
            views.add(own(range.reshape(shape.apply(slot.param())), temp));
        }
        return views;
    }

    /** Where a bucket's gathered values live while its parameters hold them, and how they leave. Grad mode is off. */
    private interface Residence {
        /** Gathers the bucket's weights from this rank's {@code shard} into its parameters, in the caller's stream order. */
        void gather(GradientBucket bucket, NDArray shard);

        /** Starts that gather; {@link #land} (or {@link #discard}) takes what its {@code await()} returns. */
        PendingCollective start(GradientBucket bucket, NDArray shard);

        /** Makes the parameters hold a started gather's result. */
        void land(GradientBucket bucket, NDArray gathered);

        /** Drops a started gather's result unused. */
        void discard(GradientBucket bucket, NDArray gathered);

        /** Drops the values the parameters hold. */
        void release(GradientBucket bucket);
    }

    /**
     * Each gather all-gathers into a new buffer and makes the parameters views of it in place; a release
     * empties them. The parameters' shapes, which an empty tensor loses, are kept here.
     */
    private static final class Views implements Residence {
        private final NDManager manager;
        private final Map<Parameter, Shape> shapes = new IdentityHashMap<>();
        /** Per bucket, the manager of the buffer its parameters are views of, or of a started gather's. */
        private final NDManager[] held;

        Views(List<GradientBucket> buckets, NDManager manager) {
            this.manager = manager;
            this.held = new NDManager[buckets.size()];
            for (GradientBucket bucket : buckets) {
                for (GradientBucket.Slot slot : bucket.slots) {
                    shapes.put(slot.param(), slot.param().data().getShape());
                }
                held[bucket.index] = manager.newSubManager();
            }
        }

        @Override
        public void gather(GradientBucket bucket, NDArray shard) {
            NDManager owner = manager.newSubManager();
            try {
                land(bucket, bucket.group.allGather(shard, 0, owner), owner);
            } catch (RuntimeException e) {
                owner.close();
                throw e;
            }
        }

        @Override
        public PendingCollective start(GradientBucket bucket, NDArray shard) {
            NDManager owner = manager.newSubManager();
            try {
                PendingCollective pending = bucket.group.startAllGather(shard, owner);
                held[bucket.index] = owner;
                return pending;
            } catch (RuntimeException e) {
                owner.close();
                throw e;
            }
        }

        @Override
        public void land(GradientBucket bucket, NDArray gathered) {
            land(bucket, gathered, held[bucket.index]);
        }

        private void land(GradientBucket bucket, NDArray full, NDManager owner) {
            try (NDManager temp = manager.newSubManager()) {
                TensorMemory.shareStorage(weights(bucket), slotViews(bucket, full, shapes::get, temp));
            }
            held[bucket.index] = owner;
        }

        @Override
        public void discard(GradientBucket bucket, NDArray gathered) {
            held[bucket.index].close();
            held[bucket.index] = null;
        }

        @Override
        public void release(GradientBucket bucket) {
            TensorMemory.releaseStorage(weights(bucket));
            held[bucket.index].close();
            held[bucket.index] = null;
        }
    }

    /**
     * Each bucket's parameters are views of one flat buffer for good (made so here, while they are whole); a
     * release frees the buffer's memory and a gather gives it memory again and all-gathers into it, with the
     * parameters, their shapes and their versions untouched.
     */
    private static final class ResizedStorage implements Residence {
        private final StorageResize resize;
        /** Per bucket, the flat buffer its parameters are views of; null for a bucket of one rank. */
        private final NDArray[] flat;

        ResizedStorage(List<GradientBucket> buckets, StorageResize resize, NDManager manager) {
            this.resize = resize;
            this.flat = new NDArray[buckets.size()];
            for (GradientBucket bucket : buckets) {
                if (bucket.group.size() == 1) {
                    continue;
                }
                NDArray buffer = DataTypes.empty(manager, new Shape(bucket.paddedNumel), bucket.paramDtype,
                        bucket.slots.get(0).param().data().getDevice());
                try (NoGrad off = NoGrad.enter(); NDManager temp = manager.newSubManager()) {
                    List<NDArray> weights = weights(bucket);
                    List<NDArray> views = slotViews(bucket, buffer, p -> p.data().getShape(), temp);
                    for (int i = 0; i < weights.size(); i++) {
                        Tensors.copyInto(views.get(i), weights.get(i));
                    }
                    TensorMemory.shareStorage(weights, views);
                }
                flat[bucket.index] = buffer;
            }
        }

        @Override
        public void gather(GradientBucket bucket, NDArray shard) {
            resize.restore(flat[bucket.index]);
            bucket.group.allGatherInto(shard, flat[bucket.index]);
        }

        @Override
        public PendingCollective start(GradientBucket bucket, NDArray shard) {
            resize.restore(flat[bucket.index]);
            return bucket.group.startAllGatherInto(shard, flat[bucket.index]);
        }

        @Override
        public void land(GradientBucket bucket, NDArray gathered) {
            // the collective wrote into the buffer itself
        }

        @Override
        public void discard(GradientBucket bucket, NDArray gathered) {
            resize.release(flat[bucket.index]);
        }

        @Override
        public void release(GradientBucket bucket) {
            resize.release(flat[bucket.index]);
        }
    }
}
