package io.mcore4j.models.gpt;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.checkpoint.DistCheckpointing;
import io.mcore4j.checkpoint.StrictMode;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.core.random.SeedScheme;
import io.mcore4j.core.shard.ShardedTensor;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.models.transformer.LayerSpec;
import io.mcore4j.models.transformer.ModelContext;
import io.mcore4j.optimizer.DistributedDataParallel;
import io.mcore4j.optimizer.MegatronOptimizer;
import io.mcore4j.optimizer.OptimizerConfig;
import io.mcore4j.optimizer.Optimizers;
import io.mcore4j.optimizer.ParameterLayout;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;
import io.mcore4j.pipeline.LayerAssignment;
import io.mcore4j.pipeline.ScheduleConfig;
import io.mcore4j.pipeline.ScheduleResult;
import io.mcore4j.pipeline.Schedules;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * A small GPT trained for a few steps at TP x PP (ranks as threads, DP 1) through the pipeline
 * schedule, the DDP wrapper and the optimizer, as the training loop composes them: every layout sees
 * the same global batch per step, so layouts can be compared step by step. Optionally starts from a
 * checkpoint and saves one at the end (model and optimizer state).
 */
final class GptTraining {
    static final int SEQ = 16;
    static final int MICRO_BATCH = 2;
    static final int MICRO_BATCHES = 2;
    private static final String MODEL = "model.";
    private static final String OPTIMIZER = "optimizer.";

    private GptTraining() {}

    /**
     * @param losses the mean loss of each step (over its micro-batches), as the last stage saw it
     * @param state every main-replica piece of the model and optimizer state at the end, keyed
     *     by checkpoint key and global offset, as raw little-endian bytes of its own dtype
     */
    record Outcome(List<Double> losses, Map<String, byte[]> state) {}

    /**
     * Trains steps {@code [from, to)}.
     *
     * @param load checkpoint to start from, or null for the initial weights
     * @param save where to save the state at the end, or null
     */
    static Outcome train(TransformerConfig config, OptimizerConfig optimizerConfig, int tp, int pp, int from, int to,
                         Path load, Path save) {
        int world = tp * pp;
        List<Outcome> perRank = InJvmWorld.run(world, rank -> {
            ProcessGroups groups = rank.groups(ParallelDims.of(world, tp, pp));
            NDManager m = rank.manager();
            ModelContext ctx = ModelContext.create(config, groups, m, new SeedScheme(11));
            int stage = groups.pipelineRank();
            int[] layers = LayerAssignment.even(config.numLayers(), pp, 1).layers(stage, 0);
            GptModel model = GptModel.build(ctx, LayerSpec.tensorParallel(), layers, stage == 0, stage == pp - 1);
            DistributedDataParallel ddp = new DistributedDataParallel(model.parameters(), groups, optimizerConfig,
                    model.sharedEmbeddingParameters());
            Map<Parameter, String> keys = new IdentityHashMap<>();
            model.namedParameters(MODEL).forEach((key, p) -> keys.put(p, key));
            MegatronOptimizer optimizer = Optimizers.create(model.parameters(), ddp, groups, optimizerConfig,
                    ParameterLayout.byKey(keys::get));
            if (load != null) {
                List<ShardedTensor> optimizerState = optimizer.shardedState(OPTIMIZER);
                List<ShardedTensor> targets = new ArrayList<>(model.shardedState(MODEL));
                targets.addAll(optimizerState);
                DistCheckpointing.load(load, targets, groups.world(), StrictMode.RAISE_ALL);
                optimizer.loadShardedState(OPTIMIZER, optimizerState);
            }
            ScheduleConfig schedule = ScheduleConfig.of(MICRO_BATCHES, new Shape(SEQ, MICRO_BATCH, config.hiddenSize()),
                    config.dtype());
            List<Double> losses = new ArrayList<>();
            for (int step = from; step < to; step++) {
                int s = step;
                ScheduleResult result = Schedules.forwardBackward((scope, chunk, mb, input) -> {
                    NDArray[] data = TokenBatches.shifted(scope.manager(), config.vocabSize(), SEQ, MICRO_BATCH,
                            3 + (s + mb) % 5, 7 * s + mb);
                    return model.forward(scope, model.isPreProcess() ? data[0] : null, input,
                            model.isPostProcess() ? data[1] : null);
                }, 1, groups, m, schedule);
                ddp.finishGradSync();
                optimizer.step(optimizerConfig.lr());
                ddp.zeroGrad();
                double sum = 0;
                for (float l : result.losses()) {
                    sum += l;
                }
                losses.add(result.losses().length == 0 ? Double.NaN : sum / result.losses().length);
            }
            List<ShardedTensor> state = new ArrayList<>(model.shardedState(MODEL));
            state.addAll(optimizer.shardedState(OPTIMIZER));
            if (save != null) {
                DistCheckpointing.save(save, state, null, groups.world());
            }
            Map<String, byte[]> bytes = new TreeMap<>();
            for (ShardedTensor t : state) {
                if (t.isMainReplica()) {
                    bytes.put(t.key() + Arrays.toString(t.globalOffset()), DataTypes.toBytes(t.data()));
                }
            }
            optimizer.close();
            ddp.close();
            return new Outcome(groups.isLastStage() && groups.tensorParallelRank() == 0 ? losses : List.of(), bytes);
        });
        List<Double> losses = null;
        Map<String, byte[]> state = new TreeMap<>();
        for (Outcome o : perRank) {
            if (!o.losses().isEmpty()) {
                losses = o.losses();
            }
            state.putAll(o.state());
        }
        return new Outcome(losses, state);
    }
}
