package io.mcore4j.tensorparallel;

import static io.mcore4j.tensorparallel.Fixtures.chunk;
import static io.mcore4j.tensorparallel.Fixtures.grad;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import ai.djl.nn.Activation;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.testing.NativeArrays;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.util.ArrayList;
import java.util.List;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * The linears' gradient accumulation fusion ({@link AccumulatingLinear}, chosen by {@link LocalLinear}: the weight
 * gradient added into {@code .grad} by its GEMM) against libtorch's autograd (product, then add): a column-parallel →
 * GELU → row-parallel MLP over three micro-batches whose gradients accumulate, at TP1, TP2 and TP4, with and without
 * sequence parallelism, every gradient to float32 rounding (float16 to one rounding of its magnitude).
 */
class GradientAccumulationFusionTest {
    static final int MICRO_BATCHES = 3;

    @ParameterizedTest(name = "TP{0} sequenceParallel={1} {2}")
    @CsvSource({"1, false, FLOAT32, 1e-5", "2, false, FLOAT32, 1e-5", "2, true, FLOAT32, 1e-5", "4, true, FLOAT32, 1e-5",
        "2, true, FLOAT16, 2e-3"})
    void theFusedAccumulationGivesLibtorchsGradients(int tpSize, boolean sequenceParallel, DataType dtype,
                                                     double tolerance) {
        List<List<NDArray>> composed = run(tpSize, sequenceParallel, dtype, "false");
        List<List<NDArray>> fused = run(tpSize, sequenceParallel, dtype, "true");
        for (int r = 0; r < tpSize; r++) {
            for (int i = 0; i < composed.get(r).size(); i++) {
                NDArray a = composed.get(r).get(i);
                NDArray b = fused.get(r).get(i);
                double d = dtype == DataType.FLOAT16 ? NativeArrays.maxRelDiff(b, a) : NativeArrays.maxAbsDiff(b, a);
                assertTrue(d <= tolerance, "rank " + r + " gradient " + i + " differs by " + d);
            }
        }
    }

    @Test
    void anUnknownSettingIsRefusedByName() {
        System.setProperty(LocalLinear.FUSION_PROPERTY, "yes");
        try {
            InJvmWorld.run(1, ctx -> {
                Communicator tp = ctx.groups(ParallelDims.of(1, 1, 1)).tp();
                try (NDManager m = ctx.manager().newSubManager()) {
                    ColumnParallelLinear fc = ColumnParallelLinear.builder(4, 4, tp).manager(m).name("fc").build();
                    try (AutogradScope scope = AutogradScope.open(m)) {
                        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                                () -> fc.forward(scope, scope.manager().ones(new Shape(2, 4))));
                        assertTrue(e.getMessage().contains("=yes: expected gpu, true or false"), e.getMessage());
                    }
                    fc.close();
                }
                return null;
            });
        } finally {
            System.clearProperty(LocalLinear.FUSION_PROPERTY);
        }
    }

    /** Per rank, in float32: the input's, fc1's and fc2's gradients after {@link #MICRO_BATCHES} backward passes. */
    private static List<List<NDArray>> run(int tpSize, boolean sequenceParallel, DataType dtype, String fusion) {
        System.setProperty(LocalLinear.FUSION_PROPERTY, fusion);
        try {
            return InJvmWorld.run(tpSize, ctx -> {
                Communicator tp = ctx.groups(ParallelDims.of(tpSize, tpSize, 1)).tp();
                int r = tp.rank();
                NDManager keep = NDManager.newBaseManager();
                try (NDManager m = ctx.manager().newSubManager()) {
                    ColumnParallelLinear fc1 = ColumnParallelLinear.builder(16, 32, tp).sequenceParallel(sequenceParallel)
                            .initializer(ParallelMlpTest.W1).biasInitializer(ParallelMlpTest.B1).dtype(dtype).manager(m)
                            .name("fc1").build();
                    RowParallelLinear fc2 = RowParallelLinear.builder(32, 16, tp).sequenceParallel(sequenceParallel)
                            .initializer(ParallelMlpTest.W2).biasInitializer(ParallelMlpTest.B2).dtype(dtype).manager(m)
                            .name("fc2").build();
                    Shape act = new Shape(8, 2, 16);
                    NDArray inputGrads = null;
                    for (int mb = 0; mb < MICRO_BATCHES; mb++) {
                        NDArray xFull = Initializers.normal(1.0, 200 + mb).create(m, act, dtype);
                        NDArray gFull = Initializers.normal(0.25, 300 + mb).create(m, act, dtype);
                        try (AutogradScope scope = AutogradScope.open(m)) {
                            NDManager s = scope.manager();
                            NDArray x = Fixtures.leaf(sequenceParallel ? chunk(xFull, 0, tpSize, r, s) : xFull, s);
                            NDArray y = fc2.forward(scope, Activation.gelu(fc1.forward(scope, x).output())).output();
                            scope.backward(new NDArray[] {y}, new NDArray[] {sequenceParallel ? chunk(gFull, 0, tpSize, r, s) : gFull});
                            NDArray dx = grad(x, s).toType(DataType.FLOAT32, true);
                            inputGrads = inputGrads == null ? dx.duplicate() : inputGrads.add(dx);
                            inputGrads.attach(m);
                        }
                    }
                    List<NDArray> out = new ArrayList<>();
                    for (NDArray g : new NDArray[] {inputGrads, fc1.weight().gradient(m), fc1.bias().gradient(m),
                        fc2.weight().gradient(m), fc2.bias().gradient(m)}) {
                        NDArray f = g.toType(DataType.FLOAT32, true);
                        f.attach(keep);
                        out.add(f);
                    }
                    fc1.close();
                    fc2.close();
                    return out;
                }
            });
        } finally {
            System.clearProperty(LocalLinear.FUSION_PROPERTY);
        }
    }
}
