package io.mcore4j.optimizer;

import static org.junit.jupiter.api.Assertions.assertEquals;

import ai.djl.ndarray.types.DataType;
import io.mcore4j.core.testing.NativeArrays;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.util.List;

import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/** Fifty training steps leave the number of live native arrays unchanged. */
class NativeMemoryTest {

    @ParameterizedTest
    @CsvSource({"false, false, ADAMW, false", "true, true, ADAMW, false", "true, false, SGD, false",
            "false, true, ADAM, false", "false, false, ADAMW, true", "true, true, ADAM, true"})
    void fiftyStepsKeepTheLiveArrayCountConstant(boolean distributed, boolean fp16, OptimizerConfig.Algorithm algorithm,
                                                 boolean fused) {
        OptimizerConfig config = OptimizerConfig.builder().algorithm(algorithm).fp16(fp16).initialLossScale(1024)
                .lossScaleWindow(7).useDistributedOptimizer(distributed).bucketSizeBytes(96).countZerosInGrad(true)
                .fusedAdam(fused).build();
        InJvmWorld.run(2, rank -> {
            ProcessGroups groups = rank.groups(ParallelDims.of(2, 1, 1));
            TinyMlp model = new TinyMlp(rank.manager(), fp16 ? DataType.FLOAT16 : DataType.FLOAT32);
            DistributedDataParallel ddp = new DistributedDataParallel(model.params, groups, config, List.of());
            MegatronOptimizer optimizer = Optimizers.create(model.params, ddp, groups, config);
            int baseline = -1;
            for (int step = 0; step < 50; step++) {
                float[][] batch = TinyMlp.batch(step, 4);
                int dp = groups.dataParallelRank();
                model.forwardBackward(rank.manager(), TinyMlp.rows(batch[0], TinyMlp.IN, 2 * dp, 2),
                        TinyMlp.rows(batch[1], TinyMlp.OUT, 2 * dp, 2), 2, optimizer.lossScale());
                ddp.finishGradSync();
                optimizer.step(1e-3, 0.01);
                optimizer.zeroGrad();
                optimizer.shardedState("optimizer.");
                if (step == 1) {
                    baseline = NativeArrays.live(rank.manager());
                }
            }
            assertEquals(baseline, NativeArrays.live(rank.manager()), "live native arrays after 50 steps");
            optimizer.close();
            ddp.close();
            model.close();
            assertEquals(0, NativeArrays.live(rank.manager()), "everything released after close");
            return null;
        });
    }
}
