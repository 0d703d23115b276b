package io.mcore4j.training.gpt;

import ai.djl.ndarray.NDManager;
import io.mcore4j.core.random.SeedScheme;
import io.mcore4j.data.gpt.SampleDataset;
import io.mcore4j.models.transformer.ModelContext;
import io.mcore4j.parallel.Backend;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.training.TrainStep;
import io.mcore4j.training.TrainingLoop;
import io.mcore4j.training.TrainingSummary;

import java.util.Objects;
import java.util.function.Consumer;

/**
 * One rank's GPT training job: builds the groups, this rank's model chunks, the {@link TrainStep}
 * and the {@link TrainingLoop} from a {@link GptTrainingSetup}, then runs the loop. What
 * {@code pretrain-gpt} and the benchmark run on every rank; a user's program can call it too.
 */
public final class GptPretraining {
    private GptPretraining() {}

    /**
     * Runs the job on this rank.
     *
     * @param setup the run's configuration
     * @param backend this rank's communication backend (all ranks call together)
     * @param root this rank's root manager, on the training device; the model lives in a child of it
     * @param train training samples
     * @param valid validation samples, or null
     * @param loop options of the loop (output, sinks, peak TFLOP/s, listener), applied to its builder
     * @param timePhases synchronise the device between a step's phases and report their times
     * @return what the run did on this rank
     */
    public static TrainingSummary run(GptTrainingSetup setup, Backend backend, NDManager root, SampleDataset train,
                                      SampleDataset valid, Consumer<TrainingLoop.Builder> loop, boolean timePhases) {
        Objects.requireNonNull(setup, "setup");
        ParallelDims dims = setup.dims(backend.worldSize());
        ProcessGroups groups = ProcessGroups.create(dims, backend);
        try (NDManager parameters = root.newSubManager()) {
            ModelContext ctx = ModelContext.create(setup.model(), groups, parameters, new SeedScheme(setup.seed()));
            if (setup.deviceInitialization() && root.getDevice().isGpu()) {
                ctx = ctx.withDeviceInitialization();
            }
            try (GptTrainingModel model = GptTrainingModel.build(ctx, setup.attention().layerSpec(setup.model()),
                    setup.virtualStages());
                 TrainStep step = TrainStep.builder(model, groups, root).optimizer(setup.optimizer())
                         .microBatchSize(setup.microBatchSize()).seqLength(setup.seqLength())
                         .globalBatchSize(setup.globalBatchSize()).timePhases(timePhases).build()) {
                int dpRank = groups.dataParallelRank();
                int dp = dims.dataParallel();
                TrainingLoop.Builder b = TrainingLoop.builder(step, setup.training(),
                        new GptBatches(train, setup.microBatchSize(), dpRank, dp));
                if (valid != null) {
                    b.valid(new GptBatches(valid, setup.microBatchSize(), dpRank, dp));
                }
                loop.accept(b);
                return b.build().run();
            }
        }
    }
}
