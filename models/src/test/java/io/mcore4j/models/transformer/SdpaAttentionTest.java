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

    /**
     * Attention straight from the fused QKV output (heads-first views, packed gradient) equals
     * splitting the output as SelfAttention's generic path does and calling the core attention:
     * the same output, and the same gradient for the projection's output, bit for bit.
     */
    @ParameterizedTest
    @CsvSource({"8, 2", "4, 4"})
    void attentionFromTheFusedProjectionMatchesTheSplitPath(int heads, int groupsCount) {
        TransformerConfig config = TransformerConfig.builder(1, 64, heads, 128).queryGroups(groupsCount).dropout(0, 0).build();
        int d = 64 / heads;
        int perGroup = heads / groupsCount;
        InJvmWorld.run(1, rank -> {
            ProcessGroups groups = rank.groups(ParallelDims.of(1, 1, 1));
            NDManager m = rank.manager();
            SdpaAttention fused = new SdpaAttention(ModelContext.create(config, groups, m, new SeedScheme(1)));
            DeterministicRandom r = new DeterministicRandom(9);
            NDArray mixed = r.normal(m, new Shape(12, 2, groupsCount * (perGroup + 2) * d), 0, 1, DataType.FLOAT32);
            NDArray weights = r.normal(m, new Shape(12, 2, heads * d), 0, 1, DataType.FLOAT32);
            NDArray[][] results = new NDArray[2][];
            for (int i = 0; i < 2; i++) {
                mixed.setRequiresGradient(true);
                Tensors.zeroGradient(mixed);
                try (AutogradScope scope = AutogradScope.open(m)) {
                    NDArray out;
                    if (i == 0) {
                        NDArray grouped = mixed.reshape(12, 2, groupsCount, perGroup + 2, d);
                        ai.djl.ndarray.NDList parts = Tensors.split(grouped, new long[] {perGroup, 1, 1}, 3);
                        out = fused.forward(scope, parts.get(0).reshape(12, 2, heads, d), parts.get(1).reshape(12, 2, groupsCount, d),
                                parts.get(2).reshape(12, 2, groupsCount, d));
                    } else {
                        out = fused.forwardFused(scope, mixed);
                    }
                    scope.backward(out.mul(weights).sum());
                    results[i] = new NDArray[] {copy(out, m), copy(Tensors.gradientOrZeros(mixed, m), m)};
                }
            }
            assertClose("output", results[1][0], results[0][0], 0);
            assertClose("gradient of the fused projection's output", results[1][1], results[0][1], 0);
            return null;
        });
    }

    private static NDArray copy(NDArray gradient, NDManager owner) {
        NDArray copy = gradient.duplicate();
        copy.attach(owner);
        return copy;
    }
}
