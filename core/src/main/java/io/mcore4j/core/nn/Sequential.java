package io.mcore4j.core.nn;

import ai.djl.ndarray.NDArray;
import io.mcore4j.core.autograd.AutogradScope;

import java.util.List;

/**
 * Children called one after another, each on the previous one's output, keyed {@code "0."},
 * {@code "1."}, ... like PyTorch's {@code nn.Sequential}. Each intermediate output is released to
 * the scope once the next child has consumed it ({@link AutogradScope#release}: whatever autograd
 * still refers to stays alive); the caller's input and the last output are never released.
 */
public final class Sequential extends AbstractModule implements UnaryModule {
    private final List<UnaryModule> steps;

    /**
     * @param steps the children, in call order; at least one
     * @throws IllegalArgumentException if there are none
     */
    public Sequential(List<? extends UnaryModule> steps) {
        if (steps.isEmpty()) {
            throw new IllegalArgumentException("a Sequential needs at least one module");
        }
        this.steps = List.copyOf(steps);
        for (int i = 0; i < this.steps.size(); i++) {
            registerModule(i + ".", this.steps.get(i));
        }
    }

    /**
     * @param steps the children, in call order; at least one
     * @return the chain
     */
    public static Sequential of(UnaryModule... steps) {
        return new Sequential(List.of(steps));
    }

    @Override
    public NDArray forward(AutogradScope scope, NDArray input) {
        NDArray x = input;
        for (UnaryModule step : steps) {
            NDArray out = step.forward(scope, x);
            if (x != input && x != out) {
                scope.release(x);
            }
            x = out;
        }
        return x;
    }
}
