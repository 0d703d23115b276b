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
import io.mcore4j.parallel.inprocess.InJvmWorld;

import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/**
 * Zero-centred norm weights (Megatron's {@code --apply-layernorm-1p}): they start at 0, and a norm with weight
 * {@code w} computes what the plain norm computes with {@code 1 + w}, output and gradients, for LayerNorm and
 * RMSNorm.
 */
class ZeroCenteredNormTest {
    @ParameterizedTest
    @EnumSource(TransformerConfig.Normalization.class)
    void weightWIsThePlainNormsOnePlusW(TransformerConfig.Normalization kind) {
        InJvmWorld.run(1, rank -> {
            NDManager m = rank.manager();
            TransformerConfig plain = TransformerConfig.builder(1, 16, 2, 32).normalization(kind, 1e-6).build();
            Norm centred = norm(rank, plain.toBuilder().layernormZeroCenteredGamma(true).build());
            Norm reference = norm(rank, plain);
            NDArray w = centred.namedParameters("").get("weight").data();
            assertClose("initial zero-centred weight", w, m.zeros(new Shape(16)), 0);
            DeterministicRandom r = new DeterministicRandom(3);
            NDArray delta = r.normal(m, new Shape(16), 0, 0.3, DataType.FLOAT32);
            Tensors.copyInto(w, delta);
            Tensors.copyInto(reference.namedParameters("").get("weight").data(), delta.add(1));
            NDArray x = r.normal(m, new Shape(5, 2, 16), 0, 1, DataType.FLOAT32);
            NDArray weights = r.normal(m, new Shape(5, 2, 16), 0, 1, DataType.FLOAT32);
            NDArray[] want = outputAndWeightGradient(m, reference, x, weights);
            NDArray[] got = outputAndWeightGradient(m, centred, x, weights);
            assertClose(kind + " output", got[0], want[0], 1e-6);
            assertClose(kind + " weight gradient", got[1], want[1], 1e-5);
            return null;
        });
    }

    private static Norm norm(InJvmWorld.Rank rank, TransformerConfig c) {
        return new Norm(ModelContext.create(c, rank.groups(ParallelDims.of(1, 1, 1)), rank.manager(), new SeedScheme(1)), 16);
    }

    private static NDArray[] outputAndWeightGradient(NDManager m, Norm norm, NDArray x, NDArray weights) {
        NDArray w = norm.namedParameters("").get("weight").data();
        Tensors.zeroGradient(w);
        try (AutogradScope scope = AutogradScope.open(m)) {
            NDArray out = norm.forward(scope, x);
            scope.backward(out.mul(weights).sum());
            NDArray[] result = {out.duplicate(), Tensors.gradientOrZeros(w, m).duplicate()};
            for (NDArray a : result) {
                a.attach(m);
            }
            return result;
        }
    }
}
