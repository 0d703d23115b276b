package io.mcore4j.optimizer;

import static io.mcore4j.optimizer.HalfPrecision.half;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;

import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.util.List;

import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * One SGD step (lr 1, no momentum, no decay) on float16 parameters whose gradients carry a loss
 * scale of 1024: the reported norm is that of the unscaled gradients, and the weights move by
 * exactly {@code -min(1, clip / norm) * G}, whether the buckets reduce in float32 or float16.
 */
class UnscaleAndClipTest {
    private static final double SCALE = 1024;

    /** Multiples of 1/64 up to 1/4: exact in float16, also times the loss scale. */
    private static float[] values(int seed, int n) {
        float[] out = new float[n];
        for (int i = 0; i < n; i++) {
            out[i] = ((seed * 5 + i * 11) % 33 - 16) / 64f;
        }
        return out;
    }

    @ParameterizedTest
    @CsvSource({"true, 0", "false, 0", "true, 0.25", "false, 0.25", "true, 2"})
    void stepUnscalesAndClipsInOnePass(boolean reduceInFp32, double clipFraction) {
        float[][] w = {values(1, 12), values(2, 4)};
        float[][] g = {values(3, 12), values(4, 4)};
        double sum = 0;
        for (float[] grad : g) {
            for (float x : grad) {
                sum += (double) x * x;
            }
        }
        double serialNorm = Math.sqrt(sum);
        double clip = clipFraction * serialNorm;
        double coefficient = clip > 0 ? Math.min(1, clip / (serialNorm + 1e-6)) : 1;
        OptimizerConfig config = OptimizerConfig.builder().algorithm(OptimizerConfig.Algorithm.SGD).sgdMomentum(0)
                .weightDecay(0).clipGrad(clip).fp16(true).initialLossScale(SCALE).gradReduceInFp32(reduceInFp32)
                .build();
        InJvmWorld.run(1, rank -> {
            ProcessGroups groups = rank.groups(ParallelDims.of(1, 1, 1));
            NDManager m = rank.manager();
            Parameter weight = Parameter.replicated("weight", half(m, w[0], 3, 4));
            Parameter bias = Parameter.replicated("bias", half(m, w[1], 4));
            List<Parameter> params = List.of(weight, bias);
            DistributedDataParallel ddp = new DistributedDataParallel(params, groups, config, List.of());
            MegatronOptimizer optimizer = Optimizers.create(params, ddp, groups, config);
            for (int i = 0; i < params.size(); i++) {
                SplitModel.addGradient(params.get(i), SplitModel.plus(new float[g[i].length], g[i], SCALE), m);
            }
            ddp.finishGradSync();
            StepResult result = optimizer.step(1.0, 0.0);
            assertFalse(result.skipped());
            assertEquals(serialNorm, result.gradNorm(), 1e-6 * serialNorm, "the norm of the unscaled gradients");
            assertEquals(SCALE, result.lossScale());
            for (int i = 0; i < params.size(); i++) {
                float[] actual = params.get(i).data().toType(DataType.FLOAT32, false).toFloatArray();
                for (int j = 0; j < actual.length; j++) {
                    double expected = w[i][j] - coefficient * g[i][j];
                    // the float16 parameter holds the float32 master rounded to 11 significant bits
                    assertEquals(expected, actual[j], 1e-3 * Math.max(0.25, Math.abs(expected)),
                            params.get(i).name() + "[" + j + "]");
                }
            }
            optimizer.zeroGrad();
            optimizer.close();
            ddp.close();
            params.forEach(Parameter::close);
            return null;
        });
    }
}
