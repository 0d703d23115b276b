package io.mcore4j.parallel;

import io.mcore4j.core.autograd.NoGrad;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;

import java.util.function.Supplier;

/**
 * How {@link Communicator} backends make the tensors they return: computed with autograd off (a
 * collective's result is data, not part of the caller's graph; autograd-aware wrappers add the
 * backward themselves) and owned by the {@code owner} manager the caller passes.
 */
public final class CollectiveResults {
    private CollectiveResults() {}

    /**
     * Runs {@code body} with libtorch's grad mode off on this thread, restoring the previous mode
     * afterwards (also when {@code body} throws).
     *
     * @param body the computation
     * @param <T> what it returns
     * @return what {@code body} returns
     */
    public static <T> T withoutGrad(Supplier<T> body) {
        try (NoGrad ignored = NoGrad.enter()) {
            return body.get();
        }
    }

    /**
     * @param source a tensor; not modified
     * @param owner manager that owns the copy
     * @return a new tensor with {@code source}'s values, on its device, owned by {@code owner}
     */
    public static NDArray copyOwnedBy(NDArray source, NDManager owner) {
        NDArray copy = source.duplicate();
        copy.attach(owner);
        return copy;
    }
}
