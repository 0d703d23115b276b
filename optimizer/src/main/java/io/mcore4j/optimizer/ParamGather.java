package io.mcore4j.optimizer;

import static io.mcore4j.core.Tensors.own;
import static io.mcore4j.optimizer.FlatTensors.range;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.nn.ForwardPreHook;
import io.mcore4j.core.nn.Parameter;

import java.util.List;

/**
 * How the distributed optimizer's updated shards reach the model's parameters: each bucket's shard
 * is all-gathered over the bucket's data-parallel group and the gathered buffer is copied into the
 * bucket's parameters. {@link MasterWeightOptimizer} picks the implementation once, from
 * {@link OptimizerConfig#overlapParamGather()} ({@link #of}): {@link #IMMEDIATE} gathers and writes
 * during the step; {@link OverlappedParamGather} starts the gathers during the step and writes a
 * bucket when the next forward is about to read one of its parameters ({@link #beforeForward}), or
 * at {@link #finish()}. Either way the parameters end with the same values. Used by one thread, the
 * one running the step and the forward.
 */
interface ParamGather extends ForwardPreHook {

    /** Gathers and writes each bucket during the step: nothing is ever pending. */
    ParamGather IMMEDIATE = new ParamGather() {
        @Override
        public void publish(GradientBucket bucket, NDArray local, NDManager buffers) {
            try (buffers) {
                writeParameters(bucket, bucket.group.allGather(local, 0, buffers), buffers);
            }
        }

        @Override
        public void beforeForward(List<Parameter> parameters) {}

        @Override
        public void finish() {}
    };

    /**
     * The implementation the configuration asks for.
     *
     * @param config the optimizer options ({@link OptimizerConfig#overlapParamGather()})
     * @param ddp the wrapper whose buckets are gathered
     * @return {@link #IMMEDIATE}, or a new {@link OverlappedParamGather} over the wrapper's buckets
     */
    static ParamGather of(OptimizerConfig config, DistributedDataParallel ddp) {
        return config.overlapParamGather() ? new OverlappedParamGather(ddp.parameters(), ddp.buckets()) : IMMEDIATE;
    }

    /**
     * The bucket indices in the order the step hands them to {@link #publish}, the same on every
     * rank of each bucket's group (their collectives are issued in this order).
     *
     * @param buckets the buckets, in index order
     * @return their indices; by default index order
     */
    default int[] publishOrder(List<GradientBucket> buckets) {
        int[] order = new int[buckets.size()];
        for (int i = 0; i < order.length; i++) {
            order[i] = i;
        }
        return order;
    }

    /**
     * All-gathers this rank's shard of a bucket's new weights over the bucket's group (every rank of
     * the group calls it for the same bucket in the same order) and writes the gathered values into
     * the bucket's parameters, now or later (then by {@link #beforeForward} or {@link #finish()}).
     *
     * @param bucket the bucket
     * @param local this rank's shard, 1-D, in the parameters' dtype and on their device; unchanged
     *     until the bucket is written
     * @param buffers manager that owns {@code local} unless it is the optimizer's own tensor, and that
     *     will own the gathered buffer; this object closes it once the bucket is written
     */
    void publish(GradientBucket bucket, NDArray local, NDManager buffers);

    /**
     * Writes every bucket that holds one of {@code parameters} and was published but not yet
     * written, waiting for its all-gather (with grad mode off for the writes, whatever the caller's).
     */
    @Override
    void beforeForward(List<Parameter> parameters);

    /** Writes every bucket published but not yet written, in publish order. */
    void finish();

    /** Called as a step begins, before it reads the master weights: by default {@link #finish()}. */
    default void beforeStep() {
        finish();
    }

    /**
     * Copies the gathered (padded) buffer of a bucket into its parameters, one copy per parameter.
     *
     * @param bucket the bucket
     * @param full the gathered buffer, {@code bucket.paddedNumel} elements
     * @param temp owner of the views
     */
    static void writeParameters(GradientBucket bucket, NDArray full, NDManager temp) {
        for (GradientBucket.Slot slot : bucket.slots) {
            NDArray view = range(full, slot.offset(), slot.offset() + slot.numel(), temp);
            NDArray data = slot.param().data();
            Tensors.copyInto(data, own(view.reshape(data.getShape()), temp));
        }
    }
}
