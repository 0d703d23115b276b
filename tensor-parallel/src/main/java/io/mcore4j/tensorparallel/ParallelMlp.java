package io.mcore4j.tensorparallel;

import ai.djl.ndarray.NDArray;
import io.mcore4j.core.TorchScriptModule;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.nn.AbstractModule;
import io.mcore4j.core.nn.UnaryModule;

import java.util.Objects;

/**
 * The dense MLP block (Megatron-Core's {@code MLP}): {@code linear_fc1} → activation →
 * {@code linear_fc2}, with keys {@code linear_fc1.*} and {@code linear_fc2.*}. The GPT's MLP and
 * MoE's shared expert are both this block; with Megatron's layout {@code linear_fc1} is
 * column-parallel (strided by {@link MlpActivation#fc1Factor()} for SwiGLU) and {@code linear_fc2}
 * row-parallel with a parallel input, so the block communicates only inside those linears.
 * Input and output are {@code [s, b, h]} ({@code [s/TP, b, h]} with sequence parallelism).
 */
public final class ParallelMlp extends AbstractModule implements UnaryModule {
    private final ParallelLinear fc1;
    private final ParallelLinear fc2;
    private final MlpActivation activation;
    private final TorchScriptModule fusedActivation;

    /**
     * A block whose activation is composed from DJL's ops.
     *
     * @param fc1 the first linear, {@code h → fc1Factor · ffn}
     * @param fc2 the second linear, {@code ffn → h}
     * @param activation the activation between them
     */
    public ParallelMlp(ParallelLinear fc1, ParallelLinear fc2, MlpActivation activation) {
        this(fc1, fc2, activation, false);
    }

    /**
     * @param fc1 the first linear, {@code h → fc1Factor · ffn}
     * @param fc2 the second linear, {@code ffn → h}
     * @param activation the activation between them
     * @param fused whether to run the activation through its fused module ({@link MlpActivation#fused}) where it has
     *     one; false to compose it from DJL's ops
     */
    public ParallelMlp(ParallelLinear fc1, ParallelLinear fc2, MlpActivation activation, boolean fused) {
        this.fc1 = registerModule("linear_fc1.", fc1);
        this.fc2 = registerModule("linear_fc2.", fc2);
        this.activation = Objects.requireNonNull(activation, "activation");
        this.fusedActivation = fused ? activation.fused() : null;
    }

    /** @return the first linear, {@code h → fc1Factor · ffn} */
    public ParallelLinear fc1() {
        return fc1;
    }

    /** @return the second linear, {@code ffn → h} */
    public ParallelLinear fc2() {
        return fc2;
    }

    /** @return the activation */
    public MlpActivation activation() {
        return activation;
    }

    @Override
    public NDArray forward(AutogradScope scope, NDArray input) {
        // fc1's output dies with the inner frame, the activation's with the outer one
        return scope.frame(() -> fc2.forward(scope,
                scope.frame(() -> activation.apply(scope, fc1.forward(scope, input).output(), fusedActivation))).output());
    }
}
