package io.mcore4j.training.gpt;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDManager;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.optimizer.DataParallelShardingStrategy;
import io.mcore4j.optimizer.OptimizerConfig;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;
import io.mcore4j.training.BatchSource;
import io.mcore4j.training.TrainStep;

import java.util.ArrayList;
import java.util.List;

import org.junit.jupiter.api.Test;

/**
 * What ZeRO-3 ({@code optim_grads_params}) keeps between layers: at DP4, once the forward has left the
 * last layer, a rank holds only the embedding's weights (the layers' and the final norm's were released;
 * one parameter per bucket here, so nothing shares a bucket with the embedding), where the distributed
 * optimizer holds every weight. Measured by a forward pre-hook on the model, told before the residency.
 */
class ZeroThreeResidencyTest {
    private static final TransformerConfig MODEL = TransformerConfig.builder(4, 64, 4, 128).maxSequenceLength(16)
            .dropout(0, 0).recomputeFull(TransformerConfig.RecomputeMethod.UNIFORM, 1).build();

    /** {resident elements before the head's forward of the second step, all elements, the embedding's}, rank 0. */
    private static long[] residentBeforeTheHead(DataParallelShardingStrategy strategy) {
        return InJvmWorld.run(4, rank -> {
            ProcessGroups groups = rank.groups(ParallelDims.of(4, 1, 1));
            try (NDManager params = rank.manager().newSubManager();
                 GptTrainingModel model = TinyGptTraining.model(MODEL, groups, params)) {
                List<Long> resident = new ArrayList<>();
                model.addForwardPreHook(ps -> resident.add(model.parameters().stream().mapToLong(p -> p.data().size()).sum()));
                long total = model.parameters().stream().mapToLong(p -> p.data().size()).sum();
                OptimizerConfig adam = OptimizerConfig.builder().lr(1e-2).useDistributedOptimizer(true)
                        .dataParallelShardingStrategy(strategy).bucketSizeBytes(1).build();
                BatchSource data = TinyGptTraining.batches(16, 2, 128);
                try (TrainStep step = TrainStep.builder(model, groups, rank.manager()).optimizer(adam).microBatchSize(2)
                        .seqLength(16).globalBatchSize(16).build()) {
                    step.run(1e-2, 0, data, 0);
                    resident.clear();
                    step.run(1e-2, 0, data, 16);
                }
                // per micro-batch: the embedding's call, one per layer, the head's
                long beforeHead = resident.get(1 + MODEL.numLayers());
                long embedding = 0;
                for (var e : model.namedParameters("").entrySet()) {
                    if (e.getKey().startsWith("embedding.")) {
                        embedding += e.getValue().data().size();
                    }
                }
                return new long[] {beforeHead, total, embedding};
            }
        }).get(0);
    }

    @Test
    void betweenLayersAZero3RankHoldsOnlyTheEmbeddingWhereTheDistributedOptimizerHoldsEveryWeight() {
        long[] zero1 = residentBeforeTheHead(DataParallelShardingStrategy.OPTIM);
        long[] zero3 = residentBeforeTheHead(DataParallelShardingStrategy.OPTIM_GRADS_PARAMS);
        System.out.printf("resident parameter elements before the head: distributed optimizer %d of %d, ZeRO-3 %d"
                + " (the embedding's %d)%n", zero1[0], zero1[1], zero3[0], zero3[2]);
        assertEquals(zero1[1], zero1[0], "the distributed optimizer keeps every weight");
        assertTrue(zero3[2] > 0 && zero3[2] < zero3[1] / 4, "the embedding is a small part: " + zero3[2] + " of " + zero3[1]);
        assertEquals(zero3[2], zero3[0], "ZeRO-3 keeps only the embedding between the last layer and the head");
    }
}
