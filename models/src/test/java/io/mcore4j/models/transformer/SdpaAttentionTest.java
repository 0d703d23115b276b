package io.mcore4j.models.transformer;

import static io.mcore4j.core.testing.NativeArrays.assertClose;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.random.DeterministicRandom;
import io.mcore4j.core.random.SeedScheme;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * The fused attention (the shipped TorchScript module, run by this CPU libtorch) against the
 * composed attention: same outputs and same gradients for queries, keys and values, with grouped
 * queries.
 */
class SdpaAttentionTest {

    /** float32 to 1e-5; bfloat16 (the module takes any floating dtype) to a few bfloat16 ulps of values near 1. */
    @ParameterizedTest
    @CsvSource({"FLOAT32, 1e-5", "BFLOAT16, 4e-2"})
    void fusedAttentionMatchesComposedAttention(DataType dtype, double tolerance) {
        TransformerConfig config = TransformerConfig.builder(1, 64, 8, 128).queryGroups(2).dropout(0, 0).build();
        InJvmWorld.run(1, rank -> {
            ProcessGroups groups = rank.groups(ParallelDims.of(1, 1, 1));
            NDManager m = rank.manager();
            ModelContext ctx = ModelContext.create(config, groups, m, new SeedScheme(1));
            CoreAttention fused = new SdpaAttention(ctx);
            CoreAttention composed = new DotProductAttention(ctx);
            DeterministicRandom r = new DeterministicRandom(5);
            NDArray q = r.normal(m, new Shape(12, 2, 8, 8), 0, 1, dtype);
            NDArray k = r.normal(m, new Shape(12, 2, 2, 8), 0, 1, dtype);
            NDArray v = r.normal(m, new Shape(12, 2, 2, 8), 0, 1, dtype);
            NDArray weights = r.normal(m, new Shape(12, 2, 64), 0, 1, dtype);
            NDArray[][] results = new NDArray[2][];
            CoreAttention[] impls = {composed, fused};
            for (int i = 0; i < 2; i++) {
                for (NDArray t : new NDArray[] {q, k, v}) {
                    t.setRequiresGradient(true);
                    Tensors.zeroGradient(t);
                }
                try (AutogradScope scope = AutogradScope.open(m)) {
                    NDArray out = impls[i].forward(scope, q, k, v);
                    scope.backward(out.mul(weights).sum());
                    NDArray kept = out.duplicate();
                    kept.attach(m);
                    // copies: the next pass zeroes and refills the same gradient tensors
                    results[i] = new NDArray[] {kept, copy(Tensors.gradientOrZeros(q, m), m),
                            copy(Tensors.gradientOrZeros(k, m), m), copy(Tensors.gradientOrZeros(v, m), m)};
                }
            }
            String[] names = {"output", "query gradient", "key gradient", "value gradient"};
            for (int j = 0; j < 4; j++) {
                assertClose(names[j] + " " + dtype, results[1][j], results[0][j], tolerance);
            }
            return null;
        });
    }

    private static NDArray copy(NDArray gradient, NDManager owner) {
        NDArray copy = gradient.duplicate();
        copy.attach(owner);
        return copy;
    }
}
