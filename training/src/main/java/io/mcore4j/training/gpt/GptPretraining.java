package io.mcore4j.training.gpt;

import ai.djl.ndarray.NDManager;
import io.mcore4j.contextparallel.ContextParallelSplit;
import io.mcore4j.core.random.SeedScheme;
import io.mcore4j.data.gpt.PackedSampleDataset;
import io.mcore4j.data.gpt.SampleDataset;
import io.mcore4j.models.gpt.GptModel;
import io.mcore4j.models.transformer.ModelContext;
import io.mcore4j.parallel.Backend;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.training.TrainStep;
import io.mcore4j.training.TrainingLoop;
import io.mcore4j.training.TrainingSummary;

import java.util.List;
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
        return run(setup, backend, root, train, valid, loop, timePhases, new ModelHooks() {});
    }

    /**
     * What a front-end does with this rank's model chunks around the loop (importing pretrained
     * weights, exporting the result); both run on every rank, so they may be collective.
     */
    public interface ModelHooks {
        /**
         * After the chunks are built and before the optimizer takes its copies of their weights.
         *
         * @param chunks this rank's chunks, in virtual-stage order
         * @param groups this rank's groups
         */
        default void beforeTraining(List<GptModel> chunks, ProcessGroups groups) {}

        /**
         * After the loop returned.
         *
         * @param chunks this rank's chunks, trained
         * @param groups this rank's groups
         */
        default void afterTraining(List<GptModel> chunks, ProcessGroups groups) {}
    }

    /**
     * Runs the job on this rank with hooks around the loop.
     *
     * @param setup the run's configuration
     * @param backend this rank's communication backend (all ranks call together)
     * @param root this rank's root manager, on the training device
     * @param train training samples
     * @param valid validation samples, or null
     * @param loop options of the loop, applied to its builder
     * @param timePhases synchronise the device between a step's phases and report their times
     * @param hooks called with the model chunks before and after the loop
     * @return what the run did on this rank
     */
    public static TrainingSummary run(GptTrainingSetup setup, Backend backend, NDManager root, SampleDataset train,
                                      SampleDataset valid, Consumer<TrainingLoop.Builder> loop, boolean timePhases,
                                      ModelHooks hooks) {
        Objects.requireNonNull(setup, "setup");
        Objects.requireNonNull(hooks, "hooks");
        for (SampleDataset data : new SampleDataset[] {train, valid}) {
            if (data != null && data instanceof PackedSampleDataset != setup.packedSamples()) {
                // a model built for one sequence per column would attend across the packed sequences without a word
                throw new IllegalArgumentException(setup.packedSamples() ? "the setup expects packed samples"
                        + " (withPackedSamples) but the data has one sequence per sample" : "the data holds packed"
                        + " samples: the setup needs withPackedSamples(true)");
            }
        }
        ParallelDims dims = setup.dims(backend.worldSize());
        ProcessGroups groups = ProcessGroups.create(dims, backend);
        try (NDManager parameters = root.newSubManager()) {
            ModelContext ctx = ModelContext.create(setup.model(), groups, parameters, new SeedScheme(setup.seed()));
            if (setup.deviceInitialization() && root.getDevice().isGpu()) {
                ctx = ctx.withDeviceInitialization();
            }
            DocumentMasking masking = setup.documentMasking();
            try (GptTrainingModel model = beforeTraining(GptTrainingModel.build(ctx, setup.layerSpec(),
                    setup.virtualStages(), setup.positionIds()), hooks, groups, setup.lora() != null);
                 TrainStep step = TrainStep.builder(model, groups, root).optimizer(setup.optimizer())
                         .microBatchSize(setup.microBatchSize()).seqLength(setup.seqLength())
                         .globalBatchSize(setup.globalBatchSize()).timePhases(timePhases).cudaGraph(setup.cudaGraph()).build()) {
                int dpRank = groups.dataParallelRank();
                int dp = dims.dataParallel();
                ContextParallelSplit cp = ContextParallelSplit.of(groups.cp());
                TrainingLoop.Builder b = TrainingLoop.builder(step, setup.training(),
                        new GptBatches(train, setup.microBatchSize(), dpRank, dp, cp, setup.dataloaderType(), masking));
                if (valid != null) {
                    b.valid(new GptBatches(valid, setup.microBatchSize(), dpRank, dp, cp, setup.dataloaderType(), masking));
                }
                loop.accept(b);
                TrainingSummary summary = b.build().run();
                hooks.afterTraining(model.chunks(), groups);
                return summary;
            }
        }
    }

    private static GptTrainingModel beforeTraining(GptTrainingModel model, ModelHooks hooks, ProcessGroups groups,
                                                   boolean lora) {
        try {
            hooks.beforeTraining(model.chunks(), groups);
            if (lora) {
                model.freezeBaseWeights(); // before the step: its optimizer and DDP see only the adapters
            }
            return model;
        } catch (RuntimeException e) {
            model.close();
            throw e;
        }
    }
}
