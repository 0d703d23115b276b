package io.mcore4j.optimizer;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.types.DataType;
import io.mcore4j.core.Precision;

import java.util.List;

import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * The optimizer's fused-kernel path (a {@code MasterAdamKernel} found for the device: on CUDA
 * mcore4j's own kernel, here {@link ReferenceKernels}) against the composed path: the same
 * training to float32 rounding, at DP1 (gradients read in place from {@code .grad}) and DP2
 * (read from the synchronised buffer), with weight decay (decaying and non-decaying buckets),
 * clipping, and fp16 with loss scaling; the distributed optimizer keeps the composed path.
 */
class KernelPathTest {

    @ParameterizedTest
    @CsvSource({"1, FLOAT32, ADAMW, false", "2, FLOAT32, ADAMW, false", "1, FLOAT16, ADAMW, false",
        "1, FLOAT32, ADAM, false", "2, FLOAT32, ADAMW, true"})
    void theKernelPathTrainsLikeTheComposedOne(int dp, DataType dtype, OptimizerConfig.Algorithm algorithm, boolean distributed) {
        OptimizerConfig config = OptimizerConfig.builder().precision(Precision.ofParamDtype(dtype)).algorithm(algorithm)
                .fusedAdam(true).lr(1e-2).weightDecay(0.05).clipGrad(0.5).useDistributedOptimizer(distributed).bucketSizeBytes(100)
                .build();
        List<DataParallelTraining.Outcome> composed = DataParallelTraining.run(dp, config, 3, 8, 2, dtype, 1e-2);
        List<DataParallelTraining.Outcome> kernel;
        int before = ReferenceKernels.STEPS.get();
        System.setProperty(ReferenceKernels.PROPERTY, "true");
        try {
            kernel = DataParallelTraining.run(dp, config, 3, 8, 2, dtype, 1e-2);
        } finally {
            System.clearProperty(ReferenceKernels.PROPERTY);
        }
        int kernelSteps = ReferenceKernels.STEPS.get() - before;
        if (distributed) {
            assertEquals(0, kernelSteps, "the distributed optimizer's shards keep the composed path");
        } else {
            assertTrue(kernelSteps > 0, "the kernel path did not run");
        }
        assertTrue(DataParallelTraining.maxAbsDiffFromStart(composed.get(0).params()) > 1e-3, "the parameters must move");
        double tolerance = dtype == DataType.FLOAT16 ? 2e-3 : 1e-5;
        for (int r = 0; r < dp; r++) {
            double diff = DataParallelTraining.maxAbsDiff(composed.get(r).params(), kernel.get(r).params());
            assertTrue(diff <= tolerance, "rank " + r + ": parameters differ by " + diff);
            for (int s = 0; s < 3; s++) {
                StepResult a = composed.get(r).steps().get(s);
                StepResult b = kernel.get(r).steps().get(s);
                assertEquals(a.skipped(), b.skipped(), "rank " + r + " step " + s + " skipped");
                if (!a.skipped()) {
                    assertEquals(a.gradNorm(), b.gradNorm(), 1e-5 * Math.max(1, a.gradNorm()), "rank " + r + " step " + s + " norm");
                }
                assertEquals(a.lossScale(), b.lossScale(), "rank " + r + " step " + s + " loss scale");
            }
        }
    }

    /**
     * The data-parallel reduction's one-pass bucket fill (a {@code BucketFillKernel} found for the device: on CUDA
     * mcore4j's own kernel, here {@link ReferenceKernels}' composition) against the composed fill (concatenation,
     * cast, division by a host scalar): bit for bit the same training at DP2 (a divisor of 2, exact either way), with
     * float16 parameters (widened into float32 buckets) and float32 ones, buckets small enough to be many, and the
     * distributed optimizer's padded buckets.
     */
    @ParameterizedTest
    @CsvSource({"FLOAT16, false", "FLOAT16, true", "FLOAT32, false", "FLOAT32, true"})
    void theOnePassFillTrainsLikeTheComposedOne(DataType dtype, boolean distributed) {
        OptimizerConfig config = OptimizerConfig.builder().precision(Precision.ofParamDtype(dtype)).lr(1e-2)
                .weightDecay(0.05).clipGrad(0.5).useDistributedOptimizer(distributed).bucketSizeBytes(100).build();
        List<DataParallelTraining.Outcome> composed = DataParallelTraining.run(2, config, 3, 8, 2, dtype, 1e-2);
        List<DataParallelTraining.Outcome> filled;
        int before = ReferenceKernels.FILLS.get();
        System.setProperty(ReferenceKernels.FILL_PROPERTY, "true");
        try {
            filled = DataParallelTraining.run(2, config, 3, 8, 2, dtype, 1e-2);
        } finally {
            System.clearProperty(ReferenceKernels.FILL_PROPERTY);
        }
        assertTrue(ReferenceKernels.FILLS.get() - before > 0, "the one-pass fill did not run");
        assertTrue(DataParallelTraining.maxAbsDiffFromStart(composed.get(0).params()) > 1e-3, "the parameters must move");
        for (int r = 0; r < 2; r++) {
            assertEquals(0.0, DataParallelTraining.maxAbsDiff(composed.get(r).params(), filled.get(r).params()),
                    "rank " + r + ": parameters");
            for (int s = 0; s < 3; s++) {
                StepResult a = composed.get(r).steps().get(s);
                StepResult b = filled.get(r).steps().get(s);
                assertEquals(a.skipped(), b.skipped(), "rank " + r + " step " + s + " skipped");
                assertEquals(a.gradNorm(), b.gradNorm(), "rank " + r + " step " + s + " norm");
            }
        }
    }
}
