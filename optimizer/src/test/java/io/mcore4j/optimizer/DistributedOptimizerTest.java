package io.mcore4j.optimizer;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.types.DataType;

import java.util.List;

import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/** The ZeRO-1 distributed optimizer equals the plain one and holds 1/DP of its state (acceptance test 2). */
class DistributedOptimizerTest {

    @ParameterizedTest
    @CsvSource({"2, ADAMW, 40000000", "4, ADAMW, 40000000", "4, ADAMW, 100", "2, ADAM, 40000000", "4, SGD, 100"})
    void distributedMatchesPlainAfterFiveStepsWithOneDpthOfTheState(int dp, OptimizerConfig.Algorithm algorithm,
                                                                     long bucketBytes) {
        OptimizerConfig plain = OptimizerConfig.builder().algorithm(algorithm).lr(1e-2).weightDecay(0.05)
                .clipGrad(0.5).bucketSizeBytes(bucketBytes).build();
        OptimizerConfig distributed = plain.toBuilder().useDistributedOptimizer(true).build();
        List<DataParallelTraining.Outcome> reference = DataParallelTraining.run(dp, plain, 5, 8, 1, DataType.FLOAT32, 1e-2);
        List<DataParallelTraining.Outcome> sharded = DataParallelTraining.run(dp, distributed, 5, 8, 1, DataType.FLOAT32, 1e-2);
        assertTrue(DataParallelTraining.maxAbsDiffFromStart(reference.get(0).params()) > 1e-3, "the parameters must move");
        long plainBytes = reference.get(0).stateBytes();
        for (int r = 0; r < dp; r++) {
            DataParallelTraining.Outcome rank = sharded.get(r);
            double d = DataParallelTraining.maxAbsDiff(rank.params(), reference.get(r).params());
            assertTrue(d <= 1e-6, "rank " + r + ": distributed optimizer differs from the plain one by " + d);
            for (int s = 0; s < 5; s++) {
                double expected = reference.get(r).steps().get(s).gradNorm();
                assertEquals(expected, rank.steps().get(s).gradNorm(), 1e-6 * Math.max(1, expected), "gradient norm of step " + s);
            }
            double ratio = (double) rank.stateBytes() / plainBytes;
            assertTrue(ratio <= 1.0 / dp + 0.05, "rank " + r + " holds " + rank.stateBytes() + " bytes of state, "
                    + ratio + " of the plain optimizer's " + plainBytes);
        }
    }
}
