package io.mcore4j.tensorparallel;

import ai.djl.ndarray.NDArray;

import java.util.Objects;

/**
 * What a parallel linear layer returns: its output and, when the layer was built with
 * {@code skipBiasAdd}, the bias it did not add (so the caller can fuse it into a later op).
 *
 * @param output the layer's output, owned by the caller's scope
 * @param bias the bias left for the caller to add, or {@code null} when the bias was added or the
 *             layer has none; this is the parameter's own tensor, not a copy
 */
public record LinearOutput(NDArray output, NDArray bias) {

    /** Checks that the output is present. */
    public LinearOutput {
        Objects.requireNonNull(output, "output");
    }
}
