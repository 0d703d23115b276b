package io.mcore4j.optimizer;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import io.mcore4j.core.autograd.NoGrad;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.PendingCollective;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;

/**
 * Megatron's {@code --overlap-param-gather}: each bucket's all-gather of updated weights is started
 * during the optimizer step ({@link Communicator#startAllGather}, on a second stream with NCCL) and
 * its parameters are written only when the next forward is about to read one of them
 * ({@link #beforeForward}, the forward pre-hook the model calls per layer), so the gathers of later
 * layers run while earlier layers compute. Buckets are published in the order the forward first
 * needs them ({@link #publishOrder}: by the first of their parameters in the model's parameter
 * order, which is the forward's), so the first layer waits only for its own bucket; a forward that
 * reads parameters in another order waits for whichever buckets it touches, in any order.
 *
 * <p>Until a bucket is written its parameters hold the previous step's values. Whatever reads the
 * weights other than a forward that calls the hook (evaluation that does not, a checkpoint save, the
 * end of training, the next step) must call {@link #finish()} first; the optimizer's own step, load
 * and close do. The gathered buffer and the shard it was gathered from live in the bucket's own
 * manager until the bucket is written.
 */
final class OverlappedParamGather implements ParamGather {

    /** A started bucket: its collective and the manager of its buffers. */
    private record InFlight(GradientBucket bucket, NDManager buffers, PendingCollective pending) {}

    private final Map<Parameter, GradientBucket> bucketOf = new IdentityHashMap<>();
    /** Each parameter's position in the model's order: the order the forward reads them. */
    private final Map<Parameter, Integer> position = new IdentityHashMap<>();
    private final List<InFlight> started = new ArrayList<>();
    private final InFlight[] byBucket;
    private int pending;

    /**
     * @param params the model's parameters in the model's order (the DDP wrapper's order)
     * @param buckets the wrapper's buckets
     */
    OverlappedParamGather(List<Parameter> params, List<GradientBucket> buckets) {
        for (int i = 0; i < params.size(); i++) {
            position.put(params.get(i), i);
        }
        for (GradientBucket bucket : buckets) {
            for (GradientBucket.Slot slot : bucket.slots) {
                bucketOf.put(slot.param(), bucket);
            }
        }
        this.byBucket = new InFlight[buckets.size()];
    }

    /** Buckets by the position of their first parameter in the model's order (the reverse of how backward fills them). */
    @Override
    public int[] publishOrder(List<GradientBucket> buckets) {
        Integer[] order = new Integer[buckets.size()];
        long[] first = new long[buckets.size()];
        for (GradientBucket bucket : buckets) {
            order[bucket.index] = bucket.index;
            first[bucket.index] = bucket.slots.stream().mapToLong(s -> position.getOrDefault(s.param(), Integer.MAX_VALUE))
                    .min().orElse(Long.MAX_VALUE);
        }
        Arrays.sort(order, Comparator.<Integer>comparingLong(i -> first[i]).thenComparingInt(i -> i));
        return Arrays.stream(order).mapToInt(Integer::intValue).toArray();
    }

    @Override
    public void publish(GradientBucket bucket, NDArray local, NDManager buffers) {
        if (byBucket[bucket.index] != null) {
            buffers.close();
            throw new IllegalStateException("the parameters of bucket " + bucket.index + " were published again before the"
                    + " previous all-gather was written: call finish() before the next step");
        }
        PendingCollective gather;
        try {
            gather = bucket.group.startAllGather(local, buffers);
        } catch (RuntimeException e) {
            buffers.close();
            throw e;
        }
        InFlight f = new InFlight(bucket, buffers, gather);
        byBucket[bucket.index] = f;
        started.add(f);
        pending++;
    }

    @Override
    public void beforeForward(List<Parameter> parameters) {
        if (pending == 0) {
            return;
        }
        for (Parameter p : parameters) {
            GradientBucket bucket = bucketOf.get(p);
            if (bucket != null && byBucket[bucket.index] != null) {
                write(byBucket[bucket.index]);
                if (pending == 0) {
                    return;
                }
            }
        }
    }

    @Override
    public void finish() {
        if (pending == 0) {
            started.clear();
            return;
        }
        RuntimeException failure = null;
        for (InFlight f : started) {
            if (byBucket[f.bucket().index] == f) {
                try {
                    write(f);
                } catch (RuntimeException e) {
                    // the others are still awaited, so that no collective is left running on released buffers
                    if (failure == null) {
                        failure = e;
                    } else {
                        failure.addSuppressed(e);
                    }
                }
            }
        }
        started.clear();
        if (failure != null) {
            throw failure;
        }
    }

    /** @return how many published buckets are not yet written */
    int pending() {
        return pending;
    }

    private void write(InFlight f) {
        byBucket[f.bucket().index] = null;
        pending--;
        try (NoGrad off = NoGrad.enter(); NDManager buffers = f.buffers()) {
            NDArray full = f.pending().await();
            ParamGather.writeParameters(f.bucket(), full, buffers);
        }
    }
}
