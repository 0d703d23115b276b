package io.mcore4j.optimizer;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.index.NDIndex;
import ai.djl.ndarray.types.DataType;
import io.mcore4j.parallel.inprocess.InJvmWorld.RankFailedException;
import ai.djl.pytorch.jni.JniUtils;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.util.ArrayList;
import java.util.List;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/** fp16 parameters with fp32 masters and dynamic loss scaling (acceptance test 4). */
class MixedPrecisionTest {

    /**
     * PP2 x DP2: rank 3 (last stage) puts an inf or NaN into one gradient element at the given
     * steps. Its pipeline peers never see that gradient, yet every rank must skip those steps.
     */
    @ParameterizedTest
    @CsvSource({"1, Infinity, false", "1, NaN, true", "2, Infinity, true"})
    void aNonFiniteGradientOnOneRankSkipsTheStepEverywhereAndBacksOffTheScale(int hysteresis, float bad,
                                                                               boolean distributed) {
        OptimizerConfig config = OptimizerConfig.builder().fp16(true).initialLossScale(1024).lossScaleWindow(3)
                .hysteresis(hysteresis).useDistributedOptimizer(distributed).lr(1e-2).build();
        // hysteresis 1: inf at step 2 halves at once; 3 clean steps later the scale doubles again
        // hysteresis 2: inf at steps 2 and 3; only the second one halves
        List<Integer> badSteps = hysteresis == 1 ? List.of(2) : List.of(2, 3);
        double[] expectedScale = hysteresis == 1
                ? new double[] {1024, 1024, 512, 512, 512, 1024, 1024}
                : new double[] {1024, 1024, 1024, 512, 512, 512, 1024};
        List<List<StepResult>> all = InJvmWorld.run(4, rank -> {
            ProcessGroups groups = rank.groups(ParallelDims.of(4, 1, 2));
            TinyMlp model = new TinyMlp(rank.manager(), DataType.FLOAT16);
            DistributedDataParallel ddp = new DistributedDataParallel(model.params, groups, config, List.of());
            MegatronOptimizer optimizer = Optimizers.create(model.params, ddp, groups, config);
            List<StepResult> results = new ArrayList<>();
            for (int step = 0; step < expectedScale.length; step++) {
                assertEquals(step == 0 ? 1024 : expectedScale[step - 1], optimizer.lossScale());
                float[][] batch = TinyMlp.batch(step, 4);
                int dp = groups.dataParallelRank();
                model.forwardBackward(rank.manager(), TinyMlp.rows(batch[0], TinyMlp.IN, 2 * dp, 2),
                        TinyMlp.rows(batch[1], TinyMlp.OUT, 2 * dp, 2), 2, optimizer.lossScale());
                if (rank.rank() == 3 && badSteps.contains(step)) {
                    NDArray g = model.params.get(2).gradient(rank.manager());
                    boolean previous = JniUtils.isGradMode();
                    JniUtils.setGradMode(false);
                    g.set(new NDIndex("1, 2"), bad);
                    JniUtils.setGradMode(previous);
                    g.close();
                }
                List<float[]> before = model.values();
                ddp.finishGradSync();
                StepResult result = optimizer.step(1e-2, 0.01);
                results.add(result);
                List<float[]> after = model.values();
                boolean unchanged = true;
                for (int i = 0; i < before.size(); i++) {
                    unchanged &= java.util.Arrays.equals(before.get(i), after.get(i));
                }
                assertEquals(result.skipped(), unchanged, "rank " + rank.rank() + " step " + step
                        + ": parameters must change exactly when the step is not skipped");
                optimizer.zeroGrad();
            }
            assertEquals(expectedScale.length - badSteps.size(), optimizer.stepCount());
            optimizer.close();
            ddp.close();
            model.close();
            return results;
        });
        for (int r = 0; r < 4; r++) {
            double[] scales = new double[expectedScale.length];
            for (int s = 0; s < scales.length; s++) {
                StepResult result = all.get(r).get(s);
                assertEquals(badSteps.contains(s), result.skipped(), "rank " + r + " step " + s);
                assertEquals(result.skipped(), Double.isNaN(result.gradNorm()));
                scales[s] = result.lossScale();
            }
            assertArrayEquals(expectedScale, scales, "rank " + r + " loss scales");
        }
    }

    @Test
    void fp16TrainingWithTheDistributedOptimizerTracksFp32LossWithinTwoPercent() {
        int steps = 50;
        OptimizerConfig fp32 = OptimizerConfig.builder().lr(5e-3).build();
        OptimizerConfig fp16 = fp32.toBuilder().fp16(true).initialLossScale(4096).useDistributedOptimizer(true).build();
        // fp32 starts from the fp16-rounded weights, so both runs start at the same point
        List<DataParallelTraining.Outcome> reference = DataParallelTraining.run(1, fp32, steps, 8, 1, DataType.FLOAT32, 5e-3);
        List<DataParallelTraining.Outcome> half = DataParallelTraining.run(2, fp16, steps, 8, 1, DataType.FLOAT16, 5e-3);
        double first = reference.get(0).losses().get(0);
        double last = reference.get(0).losses().get(steps - 1);
        assertTrue(last < 0.8 * first, "the model must learn: loss " + first + " -> " + last);
        double worst = 0;
        for (int s = 0; s < steps; s++) {
            double lossFp16 = (half.get(0).losses().get(s) + half.get(1).losses().get(s)) / 2;
            double lossFp32 = reference.get(0).losses().get(s);
            worst = Math.max(worst, Math.abs(lossFp16 - lossFp32) / lossFp32);
            assertFalse(half.get(0).steps().get(s).skipped(), "step " + s + " skipped");
        }
        System.out.printf("fp16 vs fp32 over %d steps: loss %.4f -> %.4f, worst relative deviation %.3f%%%n", steps, first, last, worst * 100);
        assertTrue(worst <= 0.02, "fp16 loss deviates from fp32 by up to " + worst * 100 + "%");
    }

    /** bf16 parameters, fp32 masters and moments sharded over DP2, no loss scaling: the loss tracks fp32 within 2%. */
    @Test
    void bf16TrainingWithTheDistributedOptimizerTracksFp32LossWithinTwoPercent() {
        int steps = 50;
        OptimizerConfig fp32 = OptimizerConfig.builder().lr(5e-3).build();
        OptimizerConfig bf16 = fp32.toBuilder().bf16(true).useDistributedOptimizer(true).build();
        List<DataParallelTraining.Outcome> reference = DataParallelTraining.run(1, fp32, steps, 8, 1, DataType.FLOAT32, 5e-3);
        List<DataParallelTraining.Outcome> half = DataParallelTraining.run(2, bf16, steps, 8, 1, DataType.BFLOAT16, 5e-3);
        double worst = 0;
        for (int s = 0; s < steps; s++) {
            double lossBf16 = (half.get(0).losses().get(s) + half.get(1).losses().get(s)) / 2;
            double lossFp32 = reference.get(0).losses().get(s);
            worst = Math.max(worst, Math.abs(lossBf16 - lossFp32) / lossFp32);
            assertFalse(half.get(0).steps().get(s).skipped(), "step " + s + " skipped");
            assertEquals(1.0, half.get(0).steps().get(s).lossScale(), "bf16 has no loss scaling");
        }
        System.out.printf("bf16 vs fp32 over %d steps: loss %.4f -> %.4f, worst relative deviation %.3f%%%n", steps,
                reference.get(0).losses().get(0), reference.get(0).losses().get(steps - 1), worst * 100);
        assertTrue(worst <= 0.02, "bf16 loss deviates from fp32 by up to " + worst * 100 + "%");
        // both ranks hold the same bf16 parameters after the all-gather of the master shards
        assertEquals(0, DataParallelTraining.maxAbsDiff(half.get(0).params(), half.get(1).params()));
    }

    @Test
    void halfPrecisionParametersMustMatchTheOptimizersPrecision() {
        OptimizerConfig fp16 = OptimizerConfig.builder().fp16(true).build();
        RankFailedException e = assertThrows(RankFailedException.class,
                () -> DataParallelTraining.run(1, fp16, 1, 8, 1, DataType.BFLOAT16, 5e-3));
        assertTrue(e.getCause() instanceof IllegalArgumentException && e.getCause().getMessage().contains("bf16(true)"),
                String.valueOf(e.getCause()));
        assertThrows(IllegalArgumentException.class, () -> OptimizerConfig.builder().fp16(true).bf16(true).build());
    }
}
