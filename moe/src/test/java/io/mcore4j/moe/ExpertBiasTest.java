package io.mcore4j.moe;

import static io.mcore4j.moe.Fixtures.assertClose;
import static io.mcore4j.moe.Fixtures.grad;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDArrays;
import ai.djl.ndarray.NDList;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.autograd.AutogradScope;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * The grouped GEMM path's bias add from the group ends (one {@code addmm} with each row's one-hot expert, the
 * archive {@code expert_bias.pt}) against the per-expert path (a split, an add per expert, a concatenation): the
 * same sums and the same gradients for the rows and every bias, experts without rows included (their bias's
 * gradient is zero), in float32 and bfloat16.
 */
class ExpertBiasTest {
    @ParameterizedTest
    @CsvSource({"FLOAT32, '0,3,0,5,0'", "FLOAT32, '4,4'", "FLOAT32, '0,0,7'", "FLOAT32, '6'",
        "BFLOAT16, '0,3,0,5,0'", "BFLOAT16, '2,9'"})
    void oneProductEqualsAnAddPerExpert(DataType dtype, String countList) {
        long[] counts = Arrays.stream(countList.split(",")).mapToLong(Long::parseLong).toArray();
        int experts = counts.length;
        long rows = Arrays.stream(counts).sum();
        int width = 16;
        try (NDManager m = NDManager.newBaseManager(); AutogradScope scope = AutogradScope.open(m)) {
            NDManager s = scope.manager();
            NDArray x = DataTypes.toType(Fixtures.normal(s, 3, 1.0, rows, width), dtype, false);
            NDArray upstream = DataTypes.toType(Fixtures.normal(s, 4, 1.0, rows, width), dtype, false);
            NDArray xComposed = Fixtures.leaf(x, s);
            NDArray xFused = Fixtures.leaf(x, s);
            List<NDArray> composedBiases = new ArrayList<>();
            List<NDArray> fusedBiases = new ArrayList<>();
            for (int e = 0; e < experts; e++) {
                NDArray b = DataTypes.toType(Fixtures.normal(s, 10 + e, 1.0, width), dtype, false);
                composedBiases.add(Fixtures.leaf(b, s));
                fusedBiases.add(Fixtures.leaf(b, s));
            }
            long[] running = new long[experts];
            for (int e = 0; e < experts; e++) {
                running[e] = counts[e] + (e == 0 ? 0 : running[e - 1]);
            }
            NDArray ends = s.create(running).toType(DataType.INT32, false);
            NDArray composed = LocalExperts.addExpertBiases(xComposed, composedBiases, counts, s);
            NDArray fused = LocalExperts.addExpertBiases(xFused, NDArrays.stack(new NDList(fusedBiases), 0), ends, s);
            scope.backward(new NDArray[] {composed, fused}, new NDArray[] {upstream, upstream});
            String where = dtype + " counts " + countList;
            assertClose(where + ": sum", fused, composed, 0);
            assertClose(where + ": rows' gradient", grad(xFused, s), grad(xComposed, s), 0);
            for (int e = 0; e < experts; e++) {
                // float32 sums in another order (one product against one reduction per expert)
                assertClose(where + ": expert " + e + "'s bias gradient", Fixtures.gradOrZeros(fusedBiases.get(e), s),
                        Fixtures.gradOrZeros(composedBiases.get(e), s), dtype == DataType.FLOAT32 ? 1e-5 : 2e-2);
            }
        }
    }
}
