package io.mcore4j.training;

import io.mcore4j.moe.MoeAuxLossTracker;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.nn.ForwardPreHook;
import io.mcore4j.core.nn.GradientReadyListener;
import io.mcore4j.core.nn.Module;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.core.nn.ParameterResidency;

import java.util.List;
import java.util.Map;

/**
 * What a {@link TrainStep} trains: this rank's chunks of a model, one chunk without pipelining or
 * one per virtual pipeline stage. The step owns the order of the iteration; the model only computes.
 * {@link io.mcore4j.training.gpt.GptTrainingModel} is the GPT; {@link SingleStageModel} wraps any
 * {@link Module} with a loss function when there is no pipelining. As a {@link Module} it lists this
 * rank's parameters, every chunk's, in a stable order, under their layout-independent keys, and its
 * pieces of the model state for a checkpoint; an implementation registers its chunks
 * ({@link io.mcore4j.core.nn.AbstractModule}) rather than walking them.
 */
public interface TrainingModel extends Module {

    /** @return model chunks on this rank (the virtual pipeline size; 1 without interleaving) */
    int numChunks();

    /**
     * @param chunk a chunk index
     * @return whether that chunk reads the micro-batch's tokens or labels (first or last pipeline chunk)
     */
    boolean readsData(int chunk);

    /**
     * The forward of one micro-batch through one chunk.
     *
     * @param scope the micro-batch's scope; create tensors in {@code scope.manager()}
     * @param chunk the chunk index
     * @param input the previous stage's activation, or null on the first chunk of the first stage
     * @param batch the micro-batch ({@link MicroBatch#NONE} where {@link #readsData} is false)
     * @return the unscaled scalar mean loss on the model's last chunk, the activation to send on elsewhere
     */
    NDArray forward(AutogradScope scope, int chunk, NDArray input, MicroBatch batch);

    /** @return parameters whose gradients are also summed over the embedding group (tied weights across stages) */
    default List<Parameter> sharedEmbeddingParameters() {
        return List.of();
    }

    /**
     * The shape of activations sent between pipeline stages; unused without pipelining.
     *
     * @param microBatchSize samples per micro-batch
     * @param seqLength tokens per sample
     * @return the shape, e.g. {@code [s (/ TP with sequence parallelism), b, h]}
     */
    Shape activationShape(int microBatchSize, int seqLength);

    /** @return the dtype of activations sent between stages */
    DataType activationDtype();

    /**
     * Sets the upstream gradient of auxiliary losses (MoE load balancing, z-loss) for the next step:
     * the loss scale over the micro-batch count. Models without auxiliary losses ignore it.
     *
     * @param scale the factor
     */
    default void setAuxLossScale(double scale) {}

    /**
     * Reduces, scales and clears the auxiliary-loss values the model's MoE routers recorded during the
     * step's forwards (Megatron's {@code MoEMetricsTracker.report}). Collective over the pipeline,
     * tensor-, context- and data-parallel groups: every rank calls it once per step. Models without
     * MoE layers return an empty report.
     *
     * @param lossScale the factor per recorded value, {@code 1 / micro-batches per step}
     * @return per loss name, the value averaged over MoE layers, and the per-layer values
     */
    default MoeAuxLossTracker.Report reportAuxLosses(double lossScale) {
        return new MoeAuxLossTracker.Report(Map.of(), Map.of());
    }

    /**
     * Registers a listener told when parameters' gradients are complete during backward, so that
     * data-parallel reduction can overlap backward. Models that cannot tell ignore it (the
     * reduction then runs after backward).
     *
     * @param listener the listener
     */
    default void addGradientReadyListener(GradientReadyListener listener) {}

    /**
     * Registers a hook told before a forward reads parameters, so that the distributed optimizer's
     * parameter all-gather can overlap the forward ({@link io.mcore4j.optimizer.OptimizerConfig#overlapParamGather()}):
     * every parameter must be named to the hook before a forward first reads it. Models that cannot
     * tell return false (the default); the step then writes every gathered parameter before its first forward.
     *
     * @param hook the hook
     * @return whether the model calls the hook
     */
    default boolean addForwardPreHook(ForwardPreHook hook) {
        return false;
    }

    /**
     * Registers the residency of parameters sharded between uses (ZeRO-3,
     * {@link io.mcore4j.core.nn.ParameterResidency}): the model names parameters before every read and
     * once it is done with them. Models that cannot return false (the default), and ZeRO-3 is refused.
     *
     * @param residency the residency
     * @return whether the model tells it
     * @throws IllegalStateException if the model could, but not as configured (a layer not recomputed)
     */
    default boolean addParameterResidency(ParameterResidency residency) {
        return false;
    }

    /** Called once after the step's last backward, before the gradients are synchronised. */
    default void finishStep() {}

    /**
     * @return the scaling state of the model's FP8 linears on this rank, which {@link TrainStep} updates after
     *     each optimizer step; null for a model without FP8 (the default)
     */
    default io.mcore4j.core.fp8.Fp8Scaling fp8Scaling() {
        return null;
    }

    /**
     * @param seqLength tokens per sample
     * @return model FLOPs per token (forward and backward), or NaN when unknown
     */
    default double flopsPerToken(int seqLength) {
        return Double.NaN;
    }

    /**
     * What a checkpoint's common state records about the model besides its tensors, so that a reader (generation,
     * export) builds the same model without being told its options again: Megatron's checkpoints keep the run's
     * arguments for the same purpose.
     *
     * @return entries for the common state; empty by default
     */
    default Map<String, Object> checkpointMetadata() {
        return Map.of();
    }
}
