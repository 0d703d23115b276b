package io.mcore4j.training;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.nn.AbstractModule;
import io.mcore4j.core.nn.Module;

import java.util.Objects;

/**
 * A user's {@link Module} trained without pipelining: one chunk that reads every micro-batch and
 * returns its loss. Tensor and data parallelism work as the module's layers provide them.
 */
public final class SingleStageModel extends AbstractModule implements TrainingModel {

    /** The forward and loss of a user's module for one micro-batch. */
    @FunctionalInterface
    public interface LossFunction {
        /**
         * @param scope the micro-batch's scope
         * @param batch the micro-batch
         * @return the scalar mean loss, unscaled
         */
        NDArray loss(AutogradScope scope, MicroBatch batch);
    }

    private final LossFunction loss;

    /**
     * @param module the module whose parameters are trained; owned by this model from now on
     * @param loss its forward and loss
     */
    public SingleStageModel(Module module, LossFunction loss) {
        registerModule("", Objects.requireNonNull(module, "module"));
        this.loss = Objects.requireNonNull(loss, "loss");
    }

    @Override
    public int numChunks() {
        return 1;
    }

    @Override
    public boolean readsData(int chunk) {
        return true;
    }

    @Override
    public NDArray forward(AutogradScope scope, int chunk, NDArray input, MicroBatch batch) {
        return loss.loss(scope, batch);
    }

    @Override
    public Shape activationShape(int microBatchSize, int seqLength) {
        return new Shape(1);
    }

    @Override
    public DataType activationDtype() {
        return DataType.FLOAT32;
    }
}
