package io.mcore4j.optimizer;

import static org.junit.jupiter.api.Assertions.assertEquals;

import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.core.random.DeterministicRandom;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.util.List;

import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * Four ranks with expert parallelism 2: a dense weight averaged over all four data-parallel ranks,
 * and one expert per expert-parallel rank summed over its expert-data-parallel pair and divided,
 * like every gradient, by the four data-parallel ranks the global batch is split over (Megatron's
 * convention: an expert's local gradient already holds the tokens its expert-parallel peers sent
 * it, here those of two data-parallel replicas). The global norm must count both experts (held by
 * different ranks) once each.
 */
class ExpertParallelTest {
    private static final long[] DENSE = {3, 4};
    private static final long[] EXPERT = {2, 4};

    private static float[] values(long seed, long[] shape) {
        return new DeterministicRandom(seed).normal((int) new Shape(shape).size(), 0, 0.5);
    }

    @ParameterizedTest
    @ValueSource(booleans = {false, true})
    void expertGradientsAreDividedByTheDataParallelSizeAndCountOncePerExpert(boolean distributed) {
        double sum = 0;
        for (float[] g : List.of(values(10, DENSE), values(20, EXPERT), values(21, EXPERT))) {
            for (float x : g) {
                sum += (double) x * x;
            }
        }
        double serialNorm = Math.sqrt(sum);
        OptimizerConfig config = OptimizerConfig.builder().algorithm(OptimizerConfig.Algorithm.SGD).sgdMomentum(0)
                .weightDecay(0).clipGrad(0).useDistributedOptimizer(distributed).build();
        ParallelDims dims = ParallelDims.builder(4).expertParallel(2).build();
        InJvmWorld.run(4, rank -> {
            ProcessGroups groups = rank.groups(dims);
            NDManager m = rank.manager();
            int expert = groups.ep().rank();
            Parameter dense = Parameter.replicated("dense", m.create(values(1, DENSE), new Shape(DENSE)));
            Parameter mine = new Parameter("expert", m.create(values(2 + expert, EXPERT), new Shape(EXPERT)),
                    Parameter.Partition.NONE, Parameter.Kind.EXPERT);
            List<Parameter> params = List.of(dense, mine);
            DistributedDataParallel ddp = new DistributedDataParallel(params, groups, config, List.of());
            MegatronOptimizer optimizer = Optimizers.create(params, ddp, groups, config);
            double[] denseNoise = {1, -1, 2, -2};
            SplitModel.addGradient(dense, SplitModel.plus(values(10, DENSE), values(11, DENSE),
                    denseNoise[groups.dpCp().rank()]), m);
            // each expert rank saw the tokens of 2 data-parallel replicas: 2 G plus noise that cancels over the pair
            float[] twoReplicas = SplitModel.plus(values(20 + expert, EXPERT), values(20 + expert, EXPERT), 1);
            SplitModel.addGradient(mine, SplitModel.plus(twoReplicas, values(30 + expert, EXPERT),
                    groups.expertDp().rank() == 0 ? 1 : -1), m);
            ddp.finishGradSync();
            StepResult result = optimizer.step(1.0, 0.0);
            assertEquals(serialNorm, result.gradNorm(), 1e-6 * serialNorm, "rank " + rank.rank());
            float[] expectedDense = SplitModel.plus(values(1, DENSE), values(10, DENSE), -1);
            float[] expectedExpert = SplitModel.plus(values(2 + expert, EXPERT), values(20 + expert, EXPERT), -1);
            float[] actualDense = dense.data().toFloatArray();
            float[] actualExpert = mine.data().toFloatArray();
            for (int i = 0; i < expectedDense.length; i++) {
                assertEquals(expectedDense[i], actualDense[i], 1e-6, "dense[" + i + "]");
            }
            for (int i = 0; i < expectedExpert.length; i++) {
                assertEquals(expectedExpert[i], actualExpert[i], 1e-6, "expert " + expert + "[" + i + "]");
            }
            optimizer.close();
            ddp.close();
            dense.close();
            mine.close();
            return null;
        });
    }
}
