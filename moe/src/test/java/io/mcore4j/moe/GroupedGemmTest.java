package io.mcore4j.moe;

import static io.mcore4j.moe.Fixtures.assertClose;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import ai.djl.engine.Engine;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.core.random.SeedScheme;
import io.mcore4j.tensorparallel.MlpActivation;

import java.util.Arrays;
import java.util.List;
import java.util.function.UnaryOperator;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * {@code --moe-grouped-gemm}: the local experts' fc1 and fc2 as one grouped product each equal the per-expert loop,
 * output, input gradient and every weight and bias gradient within 1e-5, for unequal counts, experts with no rows
 * (first, inside, last), equal counts and no rows at all; through the implementation this runtime selects and through
 * the padded fallback explicitly.
 */
class GroupedGemmTest {
    private static final int HIDDEN = 16;

    @ParameterizedTest(name = "{0} bias={1} counts {2}")
    @CsvSource({
        "GELU, false, 0 3 0 5", "SWIGLU, true, 0 3 0 5", "SWIGLU, true, 4 4 4 4", "GELU, true, 0 0 0 0",
        "SWIGLU, false, 7 0 0 0", "GELU, true, 0 1 2 0"})
    void groupedProductsEqualThePerExpertLoop(MlpActivation activation, boolean bias, String countList) {
        long[] counts = Arrays.stream(countList.split(" ")).mapToLong(Long::parseLong).toArray();
        MoeConfig loop = MoeConfig.builder(4, 2, 16).activation(activation).addBias(bias).initStd(0.3).outputInitStd(0.2)
                .batchedExperts(false).build();
        MoeConfig grouped = loop.toBuilder().groupedGemm(true).build();
        MoeGroups groups = MoeGroups.of(Fixtures.soloGroups());
        try (NDManager root = NDManager.newBaseManager()) {
            for (GroupedMatmul matmul : List.of(GroupedMatmul.select(root, DataType.FLOAT32), GroupedMatmul.PADDED)) {
                try (NDManager m = root.newSubManager();
                     LocalExperts reference = new LocalExperts(loop, HIDDEN, groups, m, new SeedScheme(5), "mlp.");
                     LocalExperts experts = new LocalExperts(grouped, HIDDEN, groups, m, new SeedScheme(5), "mlp.");
                     AutogradScope scope = AutogradScope.open(m)) {
                    assertEqualToTheLoop(matmul + " counts " + countList + ": ", scope, experts, reference, counts,
                            x -> experts.forwardGrouped(scope, x, counts, matmul));
                }
            }
        }
    }

    /**
     * The whole MLP as one Function ({@link GroupedExpertMlp}, here through its per-expert archive, which any libtorch
     * loads; the kernel's archive is the same code on {@code _grouped_mm}, checked against it by its script and on a
     * GPU) equals the per-expert loop: output, input gradient and every weight and bias gradient, for every activation,
     * with experts of no rows first, inside and last.
     */
    @ParameterizedTest(name = "{0} bias={1} counts {2}")
    @CsvSource({
        "GELU, false, 0 3 0 5", "GELU, true, 0 3 0 5", "SWIGLU, true, 0 3 0 5", "SWIGLU, false, 4 4 4 4",
        "GELU_TANH, true, 7 0 0 0", "GEGLU_TANH, true, 0 1 2 0", "GEGLU_TANH, false, 2 2 0 9"})
    void theFusedMlpEqualsThePerExpertLoop(MlpActivation activation, boolean bias, String countList) {
        long[] counts = Arrays.stream(countList.split(" ")).mapToLong(Long::parseLong).toArray();
        MoeConfig loop = MoeConfig.builder(4, 2, 16).activation(activation).addBias(bias).initStd(0.3).outputInitStd(0.2)
                .batchedExperts(false).build();
        int[] ends = new int[counts.length];
        for (int e = 0, end = 0; e < counts.length; e++) {
            end += (int) counts[e];
            ends[e] = end;
        }
        MoeGroups groups = MoeGroups.of(Fixtures.soloGroups());
        try (NDManager m = NDManager.newBaseManager();
             LocalExperts reference = new LocalExperts(loop, HIDDEN, groups, m, new SeedScheme(5), "mlp.");
             LocalExperts experts = new LocalExperts(loop, HIDDEN, groups, m, new SeedScheme(5), "mlp.");
             AutogradScope scope = AutogradScope.open(m)) {
            GroupedMatmul.Groups g = new GroupedMatmul.Groups(counts, scope.manager().create(ends));
            assertEqualToTheLoop(activation + " bias " + bias + " counts " + countList + ": ", scope, experts, reference,
                    counts, x -> experts.forwardFused(scope, GroupedExpertMlp.loop(activation), x, g));
        }
    }

    /**
     * Runs {@code path} and the reference's per-expert loop on the same rows (two leaves) with the same upstream
     * gradient, and asserts the output's shape, then (with rows) the output and the input gradient within 1e-5, and
     * every expert's gradients ({@link #assertSameExpertGradients}).
     */
    private static void assertEqualToTheLoop(String at, AutogradScope scope, LocalExperts experts, LocalExperts reference,
                                             long[] counts, UnaryOperator<NDArray> path) {
        NDManager s = scope.manager();
        long rows = TokenPermutation.sum(counts, 0, counts.length);
        NDArray input = Fixtures.normal(s, 40, 1.0, rows, HIDDEN);
        NDArray x = Fixtures.leaf(input, s);
        NDArray xr = Fixtures.leaf(input, s);
        NDArray upstream = Fixtures.normal(s, 41, 1.0, rows, HIDDEN);
        NDArray y = path.apply(x);
        NDArray yr = reference.forward(scope, xr, counts);
        scope.backward(new NDArray[] {y, yr}, new NDArray[] {upstream, upstream});
        assertEquals(yr.getShape(), y.getShape(), at + "output shape");
        if (rows > 0) {
            assertClose(at + "output", y, yr, 1e-5);
            assertClose(at + "input gradient", Fixtures.gradOrZeros(x, s), Fixtures.gradOrZeros(xr, s), 1e-5);
        }
        assertSameExpertGradients(at, experts, reference, counts, s);
    }

    /** Every weight and bias gradient of every expert within 1e-5 of the reference's; zero for an expert with no rows. */
    private static void assertSameExpertGradients(String at, LocalExperts experts, LocalExperts reference, long[] counts,
                                                  NDManager s) {
        for (int e = 0; e < counts.length; e++) {
            List<Parameter> mine = experts.expertParameters(e);
            List<Parameter> theirs = reference.expertParameters(e);
            for (int i = 0; i < mine.size(); i++) {
                NDArray grad = Fixtures.gradOrZeros(mine.get(i).data(), s);
                assertClose(at + "expert " + e + " " + mine.get(i).name() + " gradient", grad,
                        Fixtures.gradOrZeros(theirs.get(i).data(), s), 1e-5);
                if (counts[e] == 0) {
                    assertEquals(0.0, Fixtures.maxAbs(grad), at + "expert " + e + " has no rows");
                }
            }
        }
    }

    /**
     * A libtorch before 2.8 has no {@code _grouped_mm}: its archive does not load and the fallback is selected (on a
     * later libtorch the kernel's own equality is the test above).
     */
    @Test
    void aRuntimeWithoutTheGroupedKernelSelectsThePaddedProduct() {
        String version = Engine.getEngine("PyTorch").getVersion();
        String[] parts = version.split("[.-]");
        assumeTrue(Integer.parseInt(parts[0]) == 2 && Integer.parseInt(parts[1]) < 8, "libtorch " + version + " has the op");
        try (NDManager m = NDManager.newBaseManager()) {
            assertSame(GroupedMatmul.PADDED, GroupedMatmul.select(m, DataType.FLOAT32), "libtorch " + version);
        }
    }
}
