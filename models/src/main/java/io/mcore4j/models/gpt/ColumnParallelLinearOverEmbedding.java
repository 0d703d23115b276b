package io.mcore4j.models.gpt;

import ai.djl.ndarray.NDArray;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.models.transformer.ModelContext;
import io.mcore4j.tensorparallel.Mappings;

/**
 * Logits from a tied word embedding on the same rank: the column-parallel product of the hidden
 * states with the vocab-parallel embedding weight [V/TP, h], giving [s, b, V/TP].
 */
final class ColumnParallelLinearOverEmbedding {
    private ColumnParallelLinearOverEmbedding() {}

    static NDArray logits(AutogradScope scope, ModelContext ctx, NDArray hidden, Parameter wordWeight) {
        NDArray input = ctx.config().sequenceParallel()
                ? Mappings.gatherFromSequenceParallelRegion(scope, ctx.groups().tp(), hidden, true)
                : Mappings.copyToTensorParallelRegion(scope, ctx.groups().tp(), hidden);
        NDArray weightT = wordWeight.data().transpose();
        weightT.attach(scope.manager()); // else it would live in the parameters' manager
        return input.matMul(weightT);
    }
}
