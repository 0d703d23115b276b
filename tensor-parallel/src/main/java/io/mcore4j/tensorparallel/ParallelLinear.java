package io.mcore4j.tensorparallel;

import ai.djl.ndarray.NDArray;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.fp8.Fp8Linear;
import io.mcore4j.core.nn.Module;

/**
 * A linear layer as a block sees it: {@link ColumnParallelLinear} or {@link RowParallelLinear},
 * chosen by whoever builds the block (a layer spec), so that the block's code does not depend on
 * how the weight is split.
 */
public interface ParallelLinear extends Module {
    /**
     * @param scope the pass's scope; owns the output
     * @param input activations {@code [.., in]} (this rank's part of them, as the layer expects)
     * @return the output, and the bias when the layer was built with skip-bias-add
     */
    LinearOutput forward(AutogradScope scope, NDArray input);

    /**
     * The layer's local GEMMs in FP8, for a Function that fuses the layer with its neighbours and multiplies through
     * the same GEMMs, scaling slots and weight cache (the MLP half).
     *
     * @return the FP8 GEMMs where the layer was built with {@link ParallelLinearBuilder#fp8}, else null
     */
    default Fp8Linear fp8() {
        return null;
    }
}
