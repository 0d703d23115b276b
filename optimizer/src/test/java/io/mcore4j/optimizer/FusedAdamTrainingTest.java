package io.mcore4j.optimizer;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.types.DataType;

import java.util.List;

import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * The optimizer with the fused Adam kernel, which updates all of a step's shards in one kernel
 * call, follows the unfused one: small buckets give many shards, some decaying and some not, and
 * gradient clipping or loss scaling makes every step unscale the gradients first.
 */
class FusedAdamTrainingTest {

    @ParameterizedTest
    @CsvSource({"ADAMW, false, false", "ADAM, false, false", "ADAMW, true, false", "ADAMW, false, true",
            "ADAM, true, true"})
    void fusedMatchesUnfusedOverFiveSteps(OptimizerConfig.Algorithm algorithm, boolean distributed, boolean fp16) {
        OptimizerConfig unfused = OptimizerConfig.builder().algorithm(algorithm).lr(1e-2).weightDecay(0.05)
                .clipGrad(0.5).bucketSizeBytes(100).useDistributedOptimizer(distributed).fp16(fp16)
                .initialLossScale(1024).build();
        OptimizerConfig fused = unfused.toBuilder().fusedAdam(true).build();
        DataType dtype = fp16 ? DataType.FLOAT16 : DataType.FLOAT32;
        List<DataParallelTraining.Outcome> reference = DataParallelTraining.run(2, unfused, 5, 8, 2, dtype, 1e-2);
        List<DataParallelTraining.Outcome> actual = DataParallelTraining.run(2, fused, 5, 8, 2, dtype, 1e-2);
        assertTrue(DataParallelTraining.maxAbsDiffFromStart(reference.get(0).params()) > 1e-3, "the parameters must move");
        // fp16 parameters round the masters to 2^-11 relative; the update itself differs in float32 rounding only
        double tolerance = fp16 ? 2e-3 : 1e-5;
        for (int r = 0; r < 2; r++) {
            double d = DataParallelTraining.maxAbsDiff(actual.get(r).params(), reference.get(r).params());
            assertTrue(d <= tolerance, "rank " + r + ": the fused optimizer differs from the unfused one by " + d);
            for (int s = 0; s < 5; s++) {
                StepResult expected = reference.get(r).steps().get(s);
                StepResult got = actual.get(r).steps().get(s);
                assertEquals(expected.skipped(), got.skipped(), "step " + s + " skipped");
                assertEquals(expected.gradNorm(), got.gradNorm(), 1e-4 * Math.max(1, expected.gradNorm()),
                        "gradient norm of step " + s);
            }
        }
    }
}
