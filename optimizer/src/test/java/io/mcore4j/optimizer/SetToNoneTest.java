package io.mcore4j.optimizer;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import io.mcore4j.core.Precision;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.util.List;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * {@code zeroGrad(true)} (gradients set to none, the default) against {@code zeroGrad(false)}
 * (zeroed in place): the same training, bit for bit, and a parameter that no backward reached on
 * one rank still gets the others' average.
 */
class SetToNoneTest {

    @ParameterizedTest
    @CsvSource({"1, false, FLOAT32, false", "2, false, FLOAT32, false", "2, true, FLOAT32, false",
        "2, true, FLOAT16, false", "2, true, FLOAT32, true"})
    void droppingTheGradientsTrainsBitwiseLikeZeroingThem(int dp, boolean distributed, DataType dtype, boolean overlap) {
        OptimizerConfig config = OptimizerConfig.builder().precision(Precision.ofParamDtype(dtype)).lr(1e-2)
                .weightDecay(0.05).clipGrad(0.5).useDistributedOptimizer(distributed).overlapGradReduce(overlap)
                .bucketSizeBytes(100).build();
        // three steps of two micro-batches: the first micro-batch of steps 2 and 3 meets a dropped gradient
        List<DataParallelTraining.Outcome> none = DataParallelTraining.run(dp, config, 3, 8, 2, dtype, 1e-2, true);
        List<DataParallelTraining.Outcome> zero = DataParallelTraining.run(dp, config, 3, 8, 2, dtype, 1e-2, false);
        assertTrue(DataParallelTraining.maxAbsDiffFromStart(zero.get(0).params()) > 1e-3, "the parameters must move");
        for (int r = 0; r < dp; r++) {
            for (int i = 0; i < TinyMlp.NAMES.size(); i++) {
                assertArrayEquals(bits(zero.get(r).params().get(i)), bits(none.get(r).params().get(i)),
                        "rank " + r + " " + TinyMlp.NAMES.get(i));
            }
            assertEquals(zero.get(r).losses(), none.get(r).losses(), "rank " + r + " losses");
            for (int s = 0; s < 3; s++) {
                assertEquals(zero.get(r).steps().get(s), none.get(r).steps().get(s), "rank " + r + " step " + s);
            }
        }
    }

    private static int[] bits(float[] values) {
        int[] out = new int[values.length];
        for (int i = 0; i < values.length; i++) {
            out[i] = Float.floatToRawIntBits(values[i]);
        }
        return out;
    }

    @Test
    void aParameterNoBackwardReachedOnOneRankGetsTheAverageOfTheOthers() {
        OptimizerConfig config = OptimizerConfig.builder().build();
        InJvmWorld.run(2, rank -> {
            ProcessGroups groups = rank.groups(ParallelDims.of(2, 1, 1));
            NDManager m = rank.manager();
            int dp = groups.dataParallelRank();
            Parameter used = Parameter.replicated("used", m.create(new float[] {1, 2, 3}));
            Parameter sometimes = Parameter.replicated("sometimes", m.create(new float[] {4, 5}));
            List<Parameter> params = List.of(used, sometimes);
            DistributedDataParallel ddp = new DistributedDataParallel(params, groups, config, List.of());
            for (int step = 0; step < 2; step++) {
                SplitModel.addGradient(used, new float[] {2 * dp, 4, 6}, m);
                if (dp == 0) {
                    SplitModel.addGradient(sometimes, new float[] {8, -2}, m);
                } else {
                    assertNull(sometimes.gradient(m), "step " + step + ": nothing reached it on rank 1");
                }
                ddp.finishGradSync();
                try (NDManager temp = m.newSubManager()) {
                    assertArrayEquals(new float[] {1, 4, 6}, used.gradient(temp).toFloatArray());
                    assertArrayEquals(new float[] {4, -1}, sometimes.gradient(temp).toFloatArray(),
                            "rank " + dp + " step " + step + ": the average, on the rank without a gradient too");
                }
                ddp.zeroGrad(step == 0);
            }
            ddp.close();
            params.forEach(Parameter::close);
            return null;
        });
    }
}
