package io.mcore4j.optimizer;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import io.mcore4j.core.shard.ShardedTensor;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * {@link OptimizerConfig#optimizerCpuOffload()}: the shards {@link HostPlacement} picks keep their
 * masters and moments in tensors of the host manager, and training with them there is bit for bit
 * training without offload (on the CPU "host" and "device" are one device, so every float operation
 * is the same): losses, step results, parameters and every optimizer state tensor with its key, offset
 * and shape. A checkpoint saved with offload resumes without it, and the other way round.
 */
class CpuOffloadTest {
    private static final int GLOBAL_BATCH = 8;
    private static final String PREFIX = "optimizer.";
    private static final ParameterLayout LAYOUT = ParameterLayout.byKey(p -> p.name());

    /**
     * What a run ends with on one rank: losses, step results, parameters, the optimizer state by
     * {@code key@offset shape}, the placement rows ({@link MasterWeightOptimizer#placements()}) and
     * the state bytes on the host.
     */
    private record Run(List<Double> losses, List<StepResult> steps, List<float[]> params, Map<String, float[]> state,
                       List<boolean[]> placements, long hostBytes, long totalBytes) {}

    private static List<Run> train(int world, OptimizerConfig config, DataType dtype, List<float[]> weights, int from,
                                   int to, InMemoryCheckpoint load, InMemoryCheckpoint save) {
        return InJvmWorld.run(world, rank -> {
            ProcessGroups groups = rank.groups(ParallelDims.of(world, 1, 1));
            TinyMlp model = new TinyMlp(rank.manager(), dtype, weights);
            DistributedDataParallel ddp = new DistributedDataParallel(model.params, groups, config, List.of());
            MasterWeightOptimizer optimizer = (MasterWeightOptimizer) Optimizers.create(model.params, ddp, groups, config,
                    LAYOUT);
            if (load != null) {
                try (NDManager temp = rank.manager().newSubManager()) {
                    optimizer.loadShardedState(PREFIX, load.load(optimizer.shardedState(PREFIX, LAYOUT, temp), temp));
                }
            }
            List<Double> losses = new ArrayList<>();
            List<StepResult> steps = new ArrayList<>();
            int perRank = GLOBAL_BATCH / world;
            int dp = groups.dataParallelRank();
            for (int step = from; step < to; step++) {
                float[][] batch = TinyMlp.batch(step, GLOBAL_BATCH);
                losses.add(model.forwardBackward(rank.manager(), TinyMlp.rows(batch[0], TinyMlp.IN, dp * perRank, perRank),
                        TinyMlp.rows(batch[1], TinyMlp.OUT, dp * perRank, perRank), perRank, optimizer.lossScale()));
                ddp.finishGradSync();
                steps.add(optimizer.step(1e-2, 0.02));
                optimizer.zeroGrad();
            }
            Map<String, float[]> state = new TreeMap<>();
            for (ShardedTensor t : optimizer.shardedState(PREFIX)) {
                state.put(t.key() + "@" + Arrays.toString(t.globalOffset()) + " " + t.data().getShape(),
                        t.data().toType(DataType.FLOAT32, false).toFloatArray());
            }
            if (save != null) {
                save.save(optimizer.shardedState(PREFIX));
            }
            Run run = new Run(losses, steps, model.values(), state, optimizer.placements(), optimizer.hostStateBytes(),
                    optimizer.stateBytes());
            optimizer.close();
            ddp.close();
            model.close();
            return run;
        });
    }

    /** Bucket of at most 100 bytes: each of the model's four parameters is a bucket (a shard) of its own. */
    private static OptimizerConfig config(String precision, boolean distributed, boolean fused) {
        OptimizerConfig.Builder b = OptimizerConfig.builder().useDistributedOptimizer(distributed).bucketSizeBytes(100)
                .fusedAdam(fused);
        if (precision.equals("fp16")) {
            // from 2^13, doubling every 2 clean steps, the scale overflows float16 gradients at 2^15: a skipped step
            b.fp16(true).initialLossScale(1 << 13).hysteresis(1).lossScaleWindow(2);
        } else if (precision.equals("bf16")) {
            b.bf16(true);
        }
        return b.build();
    }

    private static DataType dtype(String precision) {
        return switch (precision) {
            case "fp16" -> DataType.FLOAT16;
            case "bf16" -> DataType.BFLOAT16;
            default -> DataType.FLOAT32;
        };
    }

    @ParameterizedTest
    @CsvSource({
        "fp32, false, 1.0, false", "fp32, false, 0.5, false", "fp32, true, 1.0, false", "fp32, true, 0.5, true",
        "fp16, false, 0.5, false", "fp16, true, 1.0, false", "bf16, false, 1.0, true", "bf16, true, 0.5, false"})
    void offloadedTrainingIsBitForBitTheOnDeviceTraining(String precision, boolean distributed, double fraction,
                                                        boolean fused) {
        OptimizerConfig onDevice = config(precision, distributed, fused);
        OptimizerConfig offloaded = onDevice.toBuilder().optimizerCpuOffload(true).optimizerOffloadFraction(fraction).build();
        int world = 2;
        List<float[]> start = TinyMlp.initialValues();
        List<Run> reference = train(world, onDevice, dtype(precision), start, 0, 6, null, null);
        List<Run> offload = train(world, offloaded, dtype(precision), start, 0, 6, null, null);
        for (int r = 0; r < world; r++) {
            Run a = reference.get(r);
            Run b = offload.get(r);
            String where = precision + " rank " + r + ": ";
            // where the state lives: nothing on the host without offload; with it, Megatron's share
            assertEquals(0, a.hostBytes(), where + "no state on the host without offload");
            for (boolean[] row : a.placements()) {
                assertFalse(row[0] || row[1] || row[2], where + "a shard without offload is on the host");
            }
            int hostShards = 0;
            for (boolean[] row : b.placements()) {
                for (boolean owned : row) {
                    assertEquals(row[0], owned, where + "a shard's master and moments must all live where it is placed");
                }
                hostShards += row[0] ? 1 : 0;
            }
            assertTrue(hostShards > 0, where + "no shard went to the host");
            if (fraction == 1.0) {
                assertEquals(b.totalBytes(), b.hostBytes(), where + "fraction 1.0 puts all the state on the host");
            } else {
                assertTrue(hostShards < b.placements().size(), where + "fraction " + fraction + " kept nothing on the device");
                assertTrue(b.hostBytes() >= fraction * b.totalBytes(), where + b.hostBytes() + " of " + b.totalBytes()
                        + " bytes on the host, fewer than the fraction " + fraction);
            }
            assertEquals(a.totalBytes(), b.totalBytes(), where + "the same state in all");

            // the same training, bit for bit
            assertEquals(a.losses(), b.losses(), where + "losses");
            for (int s = 0; s < a.steps().size(); s++) {
                assertEquals(a.steps().get(s), b.steps().get(s), where + "step " + s);
            }
            for (int i = 0; i < TinyMlp.NAMES.size(); i++) {
                assertArrayEquals(a.params().get(i), b.params().get(i), where + TinyMlp.NAMES.get(i));
            }
            assertEquals(a.state().keySet(), b.state().keySet(), where + "checkpoint keys, offsets and shapes");
            for (Map.Entry<String, float[]> e : a.state().entrySet()) {
                assertArrayEquals(e.getValue(), b.state().get(e.getKey()), where + e.getKey());
            }
        }
        if (precision.equals("fp16")) {
            List<StepResult> steps = offload.get(0).steps();
            assertTrue(steps.stream().anyMatch(StepResult::skipped), "an fp16 step should overflow and be skipped: " + steps);
            assertFalse(steps.get(steps.size() - 1).skipped(), "the last fp16 step should be taken: " + steps);
        }
    }

    /**
     * Saved after 3 steps with offload and resumed without it (and the other way round), training
     * continues bit for bit as a run that never stopped.
     */
    @ParameterizedTest
    @CsvSource({"true, false, 1.0", "false, true, 0.5", "true, true, 0.5", "false, false, 1.0"})
    void aCheckpointSavedWithOffloadResumesWithoutItAndViceVersa(boolean saveOffloaded, boolean distributed,
                                                                  double fraction) {
        OptimizerConfig plain = config("fp16", distributed, false).toBuilder().initialLossScale(256).build();
        OptimizerConfig offloaded = plain.toBuilder().optimizerCpuOffload(true).optimizerOffloadFraction(fraction).build();
        List<float[]> start = TinyMlp.initialValues();
        List<Run> straight = train(2, plain, DataType.FLOAT16, start, 0, 5, null, null);
        InMemoryCheckpoint checkpoint = new InMemoryCheckpoint();
        List<Run> first = train(2, saveOffloaded ? offloaded : plain, DataType.FLOAT16, start, 0, 3, null, checkpoint);
        checkpoint.assertCompleteAndDisjoint();
        List<Run> resumed = train(2, saveOffloaded ? plain : offloaded, DataType.FLOAT16, first.get(0).params(), 3, 5,
                checkpoint, null);
        assertTrue((saveOffloaded ? first : resumed).get(0).hostBytes() > 0, "the offloaded run holds state on the host");
        for (int r = 0; r < 2; r++) {
            assertEquals(straight.get(r).losses().subList(3, 5), resumed.get(r).losses(), "rank " + r + " losses");
            assertEquals(straight.get(r).steps().get(4), resumed.get(r).steps().get(1), "rank " + r + " last step");
            for (int i = 0; i < TinyMlp.NAMES.size(); i++) {
                assertArrayEquals(straight.get(r).params().get(i), resumed.get(r).params().get(i),
                        "rank " + r + " " + TinyMlp.NAMES.get(i) + " must match bit for bit");
            }
            for (Map.Entry<String, float[]> e : straight.get(r).state().entrySet()) {
                assertArrayEquals(e.getValue(), resumed.get(r).state().get(e.getKey()), "rank " + r + " " + e.getKey());
            }
        }
    }
}
