package io.mcore4j.optimizer;

import ai.djl.ndarray.types.DataType;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.util.ArrayList;
import java.util.List;

/**
 * Trains {@link TinyMlp} with pure data parallelism on in-JVM ranks: each step takes a global
 * batch, every data-parallel rank its contiguous slice, split further into micro-batches whose
 * gradients accumulate before one synchronisation.
 */
final class DataParallelTraining {
    private DataParallelTraining() {}

    /** What one rank ends with. */
    record Outcome(List<float[]> params, List<Double> losses, List<StepResult> steps, long stateBytes) {}

    static List<Outcome> run(int world, OptimizerConfig config, int steps, int globalBatch, int microBatches,
                             DataType dtype, double lr) {
        return run(world, config, steps, globalBatch, microBatches, dtype, lr, true);
    }

    /** As above; {@code setToNone} picks how {@code zeroGrad} ends each step's gradients. */
    static List<Outcome> run(int world, OptimizerConfig config, int steps, int globalBatch, int microBatches,
                             DataType dtype, double lr, boolean setToNone) {
        return InJvmWorld.run(world, rank -> {
            ProcessGroups groups = rank.groups(ParallelDims.of(world, 1, 1));
            TinyMlp model = new TinyMlp(rank.manager(), dtype);
            DistributedDataParallel ddp = new DistributedDataParallel(model.params, groups, config, List.of());
            MegatronOptimizer optimizer = Optimizers.create(model.params, ddp, groups, config);
            List<Double> losses = new ArrayList<>();
            List<StepResult> results = new ArrayList<>();
            int perRank = globalBatch / world;
            int perMicro = perRank / microBatches;
            for (int step = 0; step < steps; step++) {
                float[][] batch = TinyMlp.batch(step, globalBatch);
                double loss = 0;
                ddp.expectBackwardPasses(microBatches); // no-op unless the config overlaps
                for (int mb = 0; mb < microBatches; mb++) {
                    int from = groups.dataParallelRank() * perRank + mb * perMicro;
                    float[] x = TinyMlp.rows(batch[0], TinyMlp.IN, from, perMicro);
                    float[] y = TinyMlp.rows(batch[1], TinyMlp.OUT, from, perMicro);
                    loss += model.forwardBackward(rank.manager(), x, y, perMicro, optimizer.lossScale() / microBatches);
                    // report as a model's backward would: the last parameters first, one at a time
                    for (int i = model.params.size() - 1; i >= 0; i--) {
                        ddp.gradientsReady(List.of(model.params.get(i)));
                    }
                }
                losses.add(loss / microBatches);
                ddp.finishGradSync();
                results.add(optimizer.step(lr, config.weightDecay()));
                optimizer.zeroGrad(setToNone);
            }
            Outcome out = new Outcome(model.values(), losses, results, optimizer.stateBytes());
            optimizer.close();
            ddp.close();
            model.close();
            return out;
        });
    }

    static double maxAbsDiff(List<float[]> a, List<float[]> b) {
        double max = 0;
        for (int i = 0; i < a.size(); i++) {
            for (int j = 0; j < a.get(i).length; j++) {
                max = Math.max(max, Math.abs(a.get(i)[j] - b.get(i)[j]));
            }
        }
        return max;
    }

    static double maxAbsDiffFromStart(List<float[]> a) {
        return maxAbsDiff(a, TinyMlp.initialValues());
    }
}
