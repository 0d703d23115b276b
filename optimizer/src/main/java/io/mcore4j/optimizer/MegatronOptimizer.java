package io.mcore4j.optimizer;

import ai.djl.ndarray.NDManager;
import io.mcore4j.core.nn.ForwardPreHook;
import io.mcore4j.core.nn.ParameterResidency;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.core.shard.ShardedTensor;

import java.util.List;

/**
 * The optimizer of a (possibly parallel) model: float32 master weights, optional dynamic loss
 * scaling, global-norm clipping, and an update rule, stepped after
 * {@link DistributedDataParallel#finishGradSync()}. Built by {@link Optimizers#create}.
 *
 * <p>A step, on every rank together: add the squares of the (still loss-scaled) gradient elements
 * this rank counts (see {@link GradientNorm}) over the world group; if the sum is not finite on any
 * rank (inf/NaN), skip the step on every rank and back the loss scale off; otherwise divide the
 * sum by the squared loss scale to get the global norm, multiply the synchronised gradients in
 * place, once, by the clipping coefficient over the loss scale, update the master weights (weight
 * decay only for parameters of two or more dims) and copy them into the model parameters in place
 * (after an all-gather over the data-parallel group with the distributed optimizer, where each rank
 * owns only its shard of masters and moments).
 *
 * <p>With {@link OptimizerConfig#overlapParamGather()} that all-gather is only started by the step,
 * bucket by bucket: a bucket's parameters keep the previous values until the next forward is about to
 * read one of them and calls {@link #beforeForward} (the optimizer is the model's forward pre-hook),
 * or until {@link #finishParamSync()}. Whoever reads the weights outside such a forward (evaluation,
 * a checkpoint save, the end of training) calls {@link #finishParamSync()} first.
 *
 * <p>The optimizer owns its state (master weights, moments) in a child of the DDP wrapper's
 * manager: close the optimizer before the wrapper. One instance is used by one thread.
 */
public interface MegatronOptimizer extends ForwardPreHook, AutoCloseable {

    /**
     * One optimizer step (see the class comment). Communicates over the world group, and with the
     * distributed optimizer over each bucket's data-parallel group.
     *
     * @param learningRate the learning rate for this step, e.g. from a {@link LearningRateSchedule}
     * @param weightDecay the weight decay for this step (not applied to 1-D parameters)
     * @return what the step did
     * @throws IllegalStateException if the gradients were not synchronised
     */
    StepResult step(double learningRate, double weightDecay);

    /**
     * A step with the configured weight decay.
     *
     * @param learningRate the learning rate for this step
     * @return what the step did
     */
    default StepResult step(double learningRate) {
        return step(learningRate, config().weightDecay());
    }

    /**
     * Forward pre-hook: writes the parameters of every bucket holding one of {@code parameters} whose
     * all-gather the last step started and nothing has written yet, waiting for the gather (on a GPU:
     * making the caller's stream wait). Cheap when nothing is pending; does nothing without
     * {@link OptimizerConfig#overlapParamGather()}. Communicates nothing; call it on the thread that
     * runs the steps.
     *
     * @param parameters parameters the forward is about to read
     */
    @Override
    void beforeForward(List<Parameter> parameters);

    /**
     * Writes every parameter whose all-gather the last step started and nothing has written yet
     * (Megatron's {@code finish_param_sync} of every bucket); afterwards the model holds the updated
     * weights. Does nothing when none is pending. Communicates nothing; the step, loading and
     * {@link #close()} call it themselves.
     */
    void finishParamSync();

    /**
     * The residency the model must tell when it reads and is done with parameters, where the weights
     * are sharded between uses ({@link DataParallelShardingStrategy#OPTIM_GRADS_PARAMS}, ZeRO-3).
     *
     * @return the residency, or null when every parameter holds its values all the time (the default)
     */
    default ParameterResidency parameterResidency() {
        return null;
    }

    /** @return the factor the training loop multiplies the loss by before backward: the current loss scale with fp16, else 1.0 */
    double lossScale();

    /**
     * Sets the model's gradients to none and releases the synchronised buffers: Megatron's
     * {@code zero_grad()}, whose {@code set_to_none} defaults to true.
     */
    default void zeroGrad() {
        zeroGrad(true);
    }

    /**
     * Ends the step's gradients and releases the synchronised buffers (the DDP wrapper's
     * {@link DistributedDataParallel#zeroGrad(boolean)}).
     *
     * @param setToNone drop every {@code .grad} (Megatron's and PyTorch's default) rather than zero it
     *     in place; the gradients of the next step are bitwise the same either way
     */
    void zeroGrad(boolean setToNone);

    /** @return the configuration */
    OptimizerConfig config();

    /** @return number of steps taken, skipped steps excluded (Adam's step count) */
    long stepCount();

    /** @return bytes of optimizer state this rank holds: master weights and moments, on the device and the host */
    long stateBytes();

    /**
     * @return the part of {@link #stateBytes()} held on the host under
     *     {@link OptimizerConfig#optimizerCpuOffload()} (0 without it); the rest is device memory
     */
    long hostStateBytes();

    /**
     * Re-reads the master weights from the model parameters, e.g. after loading model weights
     * without optimizer state. Moments are left alone.
     */
    void reloadModelParams();

    /**
     * This rank's optimizer state for a checkpoint, keyed through the layout given at creation;
     * the data are views of the live state owned by an internal manager that the next call of
     * this method, or {@link #close()}, releases.
     *
     * @param prefix prepended to every key, e.g. {@code "optimizer."}
     * @return the pieces
     */
    List<ShardedTensor> shardedState(String prefix);

    /**
     * This rank's optimizer state for a checkpoint: for each parameter piece this rank owns,
     * {@code prefix + key + ".fp32_param"} and one entry per moment ({@code .exp_avg},
     * {@code .exp_avg_sq} for Adam, {@code .momentum_buffer} for SGD with momentum), with the
     * parameter's global shape and the global offsets of the piece (the distributed optimizer owns
     * flat ranges of parameters; each range is described as at most {@code 2 * dims - 1}
     * rectangles, each cut again at the stride chunks of a strided parameter, whose part is one
     * rectangle of the global tensor per chunk). Plus {@code prefix + "step"} (int64 [1]) and,
     * with fp16, {@code prefix + "loss_scaler"} (float32 [3]: scale, growth tracker, hysteresis tracker).
     * Pieces held identically by another rank have a non-zero replica id. The data are views of
     * the live state (copy them before the next step if you save asynchronously).
     *
     * @param prefix prepended to every key
     * @param layout where each parameter sits in the checkpoint
     * @param owner manager that owns the returned views
     * @return the pieces
     */
    List<ShardedTensor> shardedState(String prefix, ParameterLayout layout, NDManager owner);

    /**
     * Fills the state from loaded pieces, keyed through the layout given at creation.
     *
     * @param prefix the prefix used when saving
     * @param loaded the loaded pieces (others are ignored)
     * @throws IllegalArgumentException if a piece this rank needs is missing or has another shape
     */
    void loadShardedState(String prefix, List<ShardedTensor> loaded);

    /**
     * Fills the state from loaded pieces: {@code loaded} must hold, for every piece that
     * {@link #shardedState(String, ParameterLayout, NDManager)} describes, a tensor with the same
     * key, global offset and shape (what a checkpoint loader returns when asked for those
     * pieces); others are ignored. Copies the values, so a resumed run continues bit for bit.
     * Everything is checked before anything is written: a failed load leaves the state as it was.
     * Model parameters are not touched.
     *
     * @param prefix the prefix used when saving
     * @param layout where each parameter sits in the checkpoint
     * @param loaded the loaded pieces
     * @throws IllegalArgumentException if a piece this rank needs is missing or has another shape
     */
    void loadShardedState(String prefix, ParameterLayout layout, List<ShardedTensor> loaded);

    /** Releases the optimizer state. */
    @Override
    void close();
}
