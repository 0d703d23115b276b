package io.mcore4j.models.gpt;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.contextparallel.ContextParallelSplit;
import io.mcore4j.contextparallel.CpCommType;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.core.random.SeedScheme;
import io.mcore4j.core.shard.ShardedTensor;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.models.transformer.LayerSpec;
import io.mcore4j.models.transformer.ModelContext;
import io.mcore4j.optimizer.DistributedDataParallel;
import io.mcore4j.optimizer.OptimizerConfig;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.ReduceOp;
import io.mcore4j.parallel.inprocess.InJvmWorld;
import io.mcore4j.pipeline.LayerAssignment;
import io.mcore4j.pipeline.ScheduleConfig;
import io.mcore4j.pipeline.ScheduleResult;
import io.mcore4j.pipeline.Schedules;

import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.junit.jupiter.api.Test;

/**
 * Context parallelism composed with pipeline and data parallelism through the library's own step
 * parts: the 1F1B schedule over two stages and the data-parallel gradient reduction
 * ({@link DistributedDataParallel}, which averages over the {@code dp-cp} group). The step's loss
 * and every synchronised gradient equal the serial model's over the same micro-batches.
 */
class ContextParallelLayoutTest {
    private static final int SEQ = 16;
    private static final int BATCH = 2;
    private static final int MICRO_BATCHES = 2;
    private static final double TOLERANCE = 1e-5;

    private static TransformerConfig.Builder gqaRope() {
        return TransformerConfig.builder(2, 32, 4, 64).maxSequenceLength(SEQ).dropout(0, 0).queryGroups(2)
                .positionEmbedding(TransformerConfig.PositionEmbedding.ROPE);
    }

    @Test
    void pipelineAndDataParallelWithContextParallelismMatchSerial() {
        Step serial = run(gqaRope().build(), 1, 1, 1, 1);
        assertMatches(serial, run(gqaRope().build(), 1, 2, 2, 1), "CP2 PP2 p2p");
        assertMatches(serial, run(gqaRope().cpCommType(CpCommType.ALL_GATHER).build(), 1, 2, 1, 2), "CP2 DP2 allgather");
        assertMatches(serial, run(gqaRope().sequenceParallel(true).build(), 2, 2, 2, 1), "TP2 SP CP2 PP2 p2p");
        assertMatches(serial, run(gqaRope().build(), 1, 4, 2, 1), "CP4 PP2 p2p");
        assertMatches(serial, run(gqaRope().cpCommType(CpCommType.ALL_GATHER).build(), 2, 4, 1, 1), "TP2 CP4 allgather");
        assertMatches(serial, run(gqaRope().build(), 1, 4, 1, 2), "CP4 DP2 p2p");
        TransformerConfig hierarchical = gqaRope().cpCommType(CpCommType.A2A_P2P).hierarchicalContextParallelSizes(List.of(2, 2)).build();
        assertMatches(serial, run(hierarchical, 1, 4, 2, 1), "CP4 (a2a+p2p 2x2) PP2");
    }

    private static void assertMatches(Step expected, Step actual, String what) {
        assertEquals(expected.loss, actual.loss, TOLERANCE * Math.abs(expected.loss), "loss with " + what);
        GlobalGradients.assertClose(expected.gradients, actual.gradients, TOLERANCE, what);
    }

    private record Step(double loss, Map<String, double[]> gradients) {}

    /**
     * One step of {@code MICRO_BATCHES} micro-batches in all, split over the data-parallel ranks,
     * on {@code tp·cp·pp·dp} ranks; returns the mean loss and the synchronised global gradients.
     */
    private static Step run(TransformerConfig config, int tp, int cp, int pp, int dp) {
        int world = tp * cp * pp * dp;
        List<Step> perRank = InJvmWorld.run(world, rank -> {
            ProcessGroups groups = rank.groups(ParallelDims.builder(world).tensorParallel(tp).contextParallel(cp)
                    .pipelineParallel(pp).hierarchicalContextParallelSizes(config.hierarchicalContextParallelSizes()).build());
            NDManager m = rank.manager();
            int stage = groups.pipelineRank();
            GptModel model = GptModel.build(ModelContext.create(config, groups, m, new SeedScheme(42)), LayerSpec.tensorParallel(),
                    LayerAssignment.even(config.numLayers(), pp, 1).layers(stage, 0), stage == 0, stage == pp - 1);
            ContextParallelSplit split = ContextParallelSplit.of(groups.cp());
            int perRankBatches = MICRO_BATCHES / dp;
            int first = groups.dataParallelRank() * perRankBatches;
            long local = SEQ / cp / (config.sequenceParallel() ? tp : 1);
            ScheduleConfig sc = new ScheduleConfig(perRankBatches, new Shape(local, BATCH, config.hiddenSize()),
                    DataType.FLOAT32, false, 0, false);
            ScheduleResult result = Schedules.forwardBackward((scope, chunk, mb, input) -> {
                NDArray[] data = TokenBatches.shifted(scope.manager(), config.vocabSize(), SEQ, BATCH, 7, 3 + first + mb);
                NDArray tokens = split.split(data[0], 0, scope.manager());
                NDArray labels = split.split(data[1], 0, scope.manager());
                return model.forward(scope, model.isPreProcess() ? tokens : null, input, model.isPostProcess() ? labels : null);
            }, 1, groups, m, sc);
            try (DistributedDataParallel ddp = new DistributedDataParallel(model.parameters(), groups,
                    OptimizerConfig.builder().build(), model.sharedEmbeddingParameters())) {
                ddp.finishGradSync();
                Map<String, double[]> global = new HashMap<>();
                for (ShardedTensor t : model.shardedState("")) {
                    for (Parameter p : model.parameters()) {
                        if (p.data() == t.data()) {
                            NDArray g = Tensors.gradientOrZeros(p.data(), m);
                            global.put(t.key(), GlobalGradients.gatherTensorParallel(groups, t, g, m)
                                    .toType(DataType.FLOAT64, false).toDoubleArray());
                        }
                    }
                }
                double loss = Double.NaN;
                if (groups.isLastStage()) {
                    double sum = 0;
                    for (float l : result.losses()) {
                        sum += l;
                    }
                    NDArray mean = m.create(new double[] {sum / result.losses().length});
                    loss = groups.dpCp().allReduce(mean, ReduceOp.AVG, m).getDouble(0);
                }
                return new Step(loss, global);
            }
        });
        // every stage's rank 0 of tp and dp-cp contributes its keys; the last stage gives the loss
        Map<String, double[]> gradients = new HashMap<>();
        double loss = Double.NaN;
        for (Step s : perRank) {
            s.gradients.forEach(gradients::putIfAbsent);
            if (!Double.isNaN(s.loss)) {
                loss = s.loss;
            }
        }
        return new Step(loss, gradients);
    }
}
