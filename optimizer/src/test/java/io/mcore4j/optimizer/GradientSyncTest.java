package io.mcore4j.optimizer;

import static io.mcore4j.optimizer.HalfPrecision.half;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.Precision;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.util.List;

import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * {@link DistributedDataParallel#finishGradSync()} at TP2 x DP1, where the data-parallel reduction
 * changes nothing: float16 and bfloat16 gradients land cast in the bucket buffers, a parameter without a
 * gradient contributes zeros, and the sequence-parallel gradient is summed over TP both in the
 * buffer and in its {@code .grad} (the one write-back that is not skipped).
 */
class GradientSyncTest {

    /** Small multiples of 1/8: exact in float16 and bfloat16, and so are their sums. */
    private static float[] values(int seed, int n) {
        float[] out = new float[n];
        for (int i = 0; i < n; i++) {
            out[i] = ((seed * 7 + i * 3) % 17 - 8) / 8f;
        }
        return out;
    }

    @ParameterizedTest
    @CsvSource({"FLOAT16, true", "FLOAT16, false", "BFLOAT16, true", "BFLOAT16, false"})
    void halfPrecisionGradientsAreCopiedCastAndOnlyPreSummedOnesAreWrittenBack(DataType dtype, boolean reduceInFp32) {
        OptimizerConfig config = OptimizerConfig.builder().precision(Precision.ofParamDtype(dtype))
                .gradReduceInFp32(reduceInFp32).build();
        InJvmWorld.run(2, rank -> {
            ProcessGroups groups = rank.groups(ParallelDims.of(2, 2, 1));
            NDManager m = rank.manager();
            int tp = groups.tensorParallelRank();
            Parameter weight = new Parameter("weight", half(m, dtype, values(tp, 6), 2, 3), new Parameter.Partition(0, tp, 2),
                    Parameter.Kind.DENSE);
            Parameter bias = Parameter.replicated("bias", half(m, dtype, values(5, 3), 3));
            Parameter norm = new Parameter("norm", half(m, dtype, values(6, 3), 3), Parameter.Partition.NONE,
                    Parameter.Kind.SEQUENCE_PARALLEL);
            Parameter unused = Parameter.replicated("unused", half(m, dtype, values(7, 4), 2, 2));
            List<Parameter> params = List.of(weight, bias, norm, unused);
            DistributedDataParallel ddp = new DistributedDataParallel(params, groups, config, List.of());
            float[] weightGrad = values(10 + tp, 6);
            float[] biasGrad = values(20 + tp, 3);
            float[] normGrad = values(30 + tp, 3);
            float[] normSum = SplitModel.plus(values(30, 3), values(31, 3), 1);
            SplitModel.addGradient(weight, weightGrad, m);
            SplitModel.addGradient(bias, biasGrad, m);
            SplitModel.addGradient(norm, normGrad, m);
            ddp.finishGradSync();
            for (GradientBucket bucket : ddp.buckets()) {
                NDArray synced = ddp.syncedShard(bucket.index);
                assertEquals(reduceInFp32 ? DataType.FLOAT32 : dtype, DataTypes.of(synced));
                float[] flat = DataTypes.toType(synced, DataType.FLOAT32, false).toFloatArray();
                assertEquals(bucket.paddedNumel, flat.length);
                for (GradientBucket.Slot slot : bucket.slots) {
                    Parameter p = slot.param();
                    float[] expected = p == weight ? weightGrad : p == bias ? biasGrad : p == norm ? normSum
                            : new float[(int) slot.numel()];
                    float[] actual = new float[(int) slot.numel()];
                    System.arraycopy(flat, (int) slot.offset(), actual, 0, actual.length);
                    assertArrayEquals(expected, actual, p.name() + " in " + bucket);
                }
            }
            assertArrayEquals(normSum, grad(norm, m), "the sequence-parallel sum is written back");
            assertArrayEquals(weightGrad, grad(weight, m));
            assertArrayEquals(biasGrad, grad(bias, m));
            assertNull(unused.gradient(m), "no gradient appears where backward wrote none");
            ddp.zeroGrad();
            ddp.close();
            params.forEach(Parameter::close);
            return null;
        });
    }

    private static float[] grad(Parameter p, NDManager m) {
        return DataTypes.toType(p.gradient(m), DataType.FLOAT32, false).toFloatArray();
    }
}
