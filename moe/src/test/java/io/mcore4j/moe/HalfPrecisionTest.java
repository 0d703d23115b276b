package io.mcore4j.moe;

import static io.mcore4j.moe.Fixtures.grad;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.random.SeedScheme;
import io.mcore4j.core.testing.NativeArrays;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * A float16 layer (with routing in float32 or in float16) follows the float32 layer built from the
 * same seeds at EP2, within float16 rounding. Routing is a discrete decision, so the inputs are
 * drawn such that no token is close to a tie (large router init), and the comparison is relative.
 */
class HalfPrecisionTest {

    @ParameterizedTest(name = "routerInFp32={0} {1}")
    @CsvSource({"true, ALL_TO_ALL", "false, ALL_GATHER"})
    void float16FollowsFloat32(boolean routerInFp32, MoeConfig.Dispatcher dispatcher) {
        MoeConfig.Builder b = MoeConfig.builder(4, 2, 8).initStd(0.5).outputInitStd(0.2).auxLossCoeff(0.1)
                .zLossCoeff(0.01).routerInFp32(routerInFp32).dispatcher(dispatcher);
        MoeConfig full = b.build();
        MoeConfig half = b.dtype(DataType.FLOAT16).build();
        InJvmWorld.run(2, ctx -> {
            ProcessGroups groups = ctx.groups(ParallelDims.builder(2).expertParallel(2).build());
            try (NDManager m = ctx.manager().newSubManager()) {
                MoeLayer a = MoeLayer.build(full, 8, groups, m, new SeedScheme(2), "mlp.", new AuxLossScale());
                MoeLayer h = MoeLayer.build(half, 8, groups, m, new SeedScheme(2), "mlp.", new AuxLossScale());
                try (AutogradScope scope = AutogradScope.open(m)) {
                    NDManager s = scope.manager();
                    NDArray input = Fixtures.normal(s, 20 + ctx.rank(), 1.0, 4, 2, 8);
                    NDArray upstream = Fixtures.normal(s, 30 + ctx.rank(), 1.0, 4, 2, 8);
                    NDArray xa = Fixtures.leaf(input, s);
                    NDArray xh = Fixtures.leaf(input.toType(DataType.FLOAT16, false), s);
                    NDArray ya = a.forward(scope, xa);
                    NDArray yh = h.forward(scope, xh);
                    assertEquals(DataType.FLOAT16, yh.getDataType());
                    scope.backward(new NDArray[] {ya, yh},
                            new NDArray[] {upstream, upstream.toType(DataType.FLOAT16, false)});
                    double out = NativeArrays.maxRelDiff(yh.toType(DataType.FLOAT32, false), ya);
                    double dx = NativeArrays.maxRelDiff(grad(xh, s).toType(DataType.FLOAT32, false), grad(xa, s));
                    assertTrue(out < 1e-2, "output relative difference " + out);
                    assertTrue(dx < 1e-2, "input gradient relative difference " + dx);
                    for (int i = 0; i < a.parameters().size(); i++) {
                        NDArray ga = grad(a.parameters().get(i).data(), s);
                        NDArray gh = grad(h.parameters().get(i).data(), s).toType(DataType.FLOAT32, false);
                        double d = NativeArrays.maxRelDiff(gh, ga);
                        assertTrue(d < 2e-2, a.parameters().get(i).name() + " gradient relative difference " + d);
                    }
                }
                a.close();
                h.close();
            }
            return null;
        });
    }
}
