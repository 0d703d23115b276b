package io.mcore4j.samples.pretrain;

import static io.mcore4j.samples.pretrain.PretrainRuns.assertSameLosses;
import static io.mcore4j.samples.pretrain.PretrainRuns.refusal;
import static io.mcore4j.samples.pretrain.PretrainRuns.runRefusal;
import static io.mcore4j.samples.pretrain.PretrainRuns.train;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.mcore4j.core.kernel.PoisoningStorageResize;
import io.mcore4j.optimizer.DataParallelShardingStrategy;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Megatron FSDP's {@code --use-megatron-fsdp --data-parallel-sharding-strategy optim_grads} (ZeRO-2) and
 * {@code optim_grads_params} (ZeRO-3, with every layer recomputed, and without where the weights are freed in
 * place): the serial run's losses at DP4 and at
 * TP2 x DP2 with sequence parallelism (two micro-batches per rank, so shards are summed over passes), and
 * checkpoints that move between each at DP4 and the distributed optimizer at TP2 x DP2 in both directions.
 */
class PretrainGptFsdpTest {
    private static final List<String> ZERO2 = List.of("--use-megatron-fsdp", "--data-parallel-sharding-strategy", "optim_grads");
    private static final List<String> ZERO3 = List.of("--use-megatron-fsdp", "--data-parallel-sharding-strategy",
            "optim_grads_params", "--recompute-granularity", "full", "--recompute-method", "uniform",
            "--recompute-num-layers", "1");

    /** ZeRO-3 with every layer keeping its graph: only where the device frees weights in place. */
    private static final List<String> ZERO3_KEPT = ZERO3.subList(0, 3);

    @TempDir
    Path dir;

    private List<String> common(int nproc, int steps) {
        return new ArrayList<>(List.of("--nproc", String.valueOf(nproc), "--num-layers", "3", "--hidden-size", "32",
                "--num-attention-heads", "4", "--seq-length", "16", "--micro-batch-size", "2", "--global-batch-size", "16",
                "--lr", "1e-2", "--min-lr", "1e-3", "--lr-warmup-iters", "1", "--train-iters", String.valueOf(steps),
                "--lr-decay-iters", "6", "--mock-data", "--vocab-size", "250", "--make-vocab-size-divisible-by", "64",
                "--log-interval", "5", "--seed", "7", "--clip-grad", "1.0", "--ddp-bucket-size", "2000",
                "--metrics-dir", dir.resolve("metrics-" + System.nanoTime()).toString()));
    }

    private List<String> with(List<String> base, List<String>... more) {
        List<String> out = new ArrayList<>(base);
        for (List<String> m : more) {
            out.addAll(m);
        }
        return out;
    }

    @Test
    void zero2GivesTheSerialLossesAloneAndWithTensorAndSequenceParallelism() throws Exception {
        List<Double> serial = train(common(1, 6));
        // mock tokens are random, so the loss hovers at ln(250); that it changes shows the weights move
        assertTrue(Math.abs(serial.get(5) - serial.get(1)) > 1e-3, "the weights should move: " + serial);
        assertSameLosses(serial, train(with(common(4, 6), ZERO2)), "DP4 ZeRO-2");
        assertSameLosses(serial, train(with(common(4, 6), ZERO2, List.of("--overlap-grad-reduce"))),
                "DP4 ZeRO-2 + overlapped reduction");
        // Megatron's default bucket size: one bucket holds the embedding, which no layer reports, beside layer weights
        List<String> defaultBuckets = with(common(4, 6), ZERO2);
        defaultBuckets.subList(defaultBuckets.indexOf("--ddp-bucket-size"), defaultBuckets.indexOf("--ddp-bucket-size") + 2)
                .clear();
        assertSameLosses(serial, train(defaultBuckets), "DP4 ZeRO-2, default buckets, 2 micro-batches");
        assertSameLosses(serial, train(with(common(4, 6), ZERO2,
                List.of("--tensor-model-parallel-size", "2", "--sequence-parallel"))), "TP2 DP2 + SP ZeRO-2");
    }

    @Test
    void zero3GivesTheSerialLossesAloneAndWithTensorAndSequenceParallelism() throws Exception {
        List<Double> serial = train(common(1, 6));
        assertSameLosses(serial, train(with(common(4, 6), ZERO3)), "DP4 ZeRO-3");
        assertSameLosses(serial, train(with(common(4, 6), ZERO3,
                List.of("--tensor-model-parallel-size", "2", "--sequence-parallel"))), "TP2 DP2 + SP ZeRO-3");
    }

    /**
     * ZeRO-3 in bfloat16 gathers the weights the distributed optimizer would publish (its fp32 master shards
     * cast to bf16): ZeRO-2 with the same recompute gives its losses, with a separate output layer. One
     * micro-batch per rank, since ZeRO-2 sums a recomputed layer's bf16 gradients over the micro-batches
     * before reducing them, where ZeRO-3 reduces each pass (it reports those layers), which rounds otherwise.
     */
    @Test
    void zero3InBfloat16WithASeparateOutputLayerGivesZero2sLosses() throws Exception {
        List<String> bf16 = List.of("--bf16", "--untie-embeddings-and-output-weights");
        List<String> recompute = ZERO3.subList(3, ZERO3.size());
        List<String> oneMicroBatch = common(4, 4);
        oneMicroBatch.set(oneMicroBatch.indexOf("--global-batch-size") + 1, "8");
        assertSameLosses(train(with(oneMicroBatch, bf16, ZERO2, recompute)), train(with(oneMicroBatch, bf16, ZERO3)),
                "DP4 bf16 ZeRO-3 against ZeRO-2");
    }

    /**
     * ZeRO-3 where the device can free a buffer's memory in place (mcore4j's native library on a GPU): no layer
     * is recomputed, each layer's weights are released after its forward and gathered again for its backward.
     * Here the CPU stands in with {@link PoisoningStorageResize}, whose release writes NaN over the weights:
     * any read of a released weight would poison the losses. The serial losses at DP4, with overlapped
     * reduction, at TP2 x DP2 with sequence parallelism, with one layer of three recomputed (both kinds of
     * layer in one model), at CP2 x DP2, and with experts (EP2 x DP4); in bf16 ZeRO-2's.
     */
    @Test
    void zero3WithoutRecomputeReleasesKeptGraphsWeightsAndGivesTheSerialLosses() throws Exception {
        List<Double> serial = train(common(1, 6));
        List<String> moe = List.of("--num-experts", "4", "--moe-router-topk", "2", "--moe-grouped-gemm");
        List<Double> serialMoe = train(with(common(1, 6), moe));
        List<String> bf16 = List.of("--bf16", "--untie-embeddings-and-output-weights");
        List<String> oneMicroBatch = common(4, 4);
        oneMicroBatch.set(oneMicroBatch.indexOf("--global-batch-size") + 1, "8");
        List<Double> zero2Bf16 = train(with(oneMicroBatch, bf16, ZERO2));
        int before = PoisoningStorageResize.RELEASES.get();
        PoisoningStorageResize.Provider.enabled = true;
        try {
            assertSameLosses(serial, train(with(common(4, 6), ZERO3_KEPT)), "DP4 ZeRO-3, no recompute");
            assertTrue(PoisoningStorageResize.RELEASES.get() > before, "the weights were released in place");
            assertSameLosses(serial, train(with(common(4, 6), ZERO3_KEPT, List.of("--overlap-grad-reduce"))),
                    "DP4 ZeRO-3, no recompute, overlapped reduction");
            assertSameLosses(serial, train(with(common(4, 6), ZERO3_KEPT, List.of("--overlap-grad-reduce",
                    "--ddp-average-in-collective"))), "DP4 ZeRO-3, no recompute, overlapped reduction averaged in the collective");
            assertSameLosses(serial, train(with(common(4, 6), ZERO3_KEPT,
                    List.of("--tensor-model-parallel-size", "2", "--sequence-parallel"))), "TP2 DP2 + SP ZeRO-3, no recompute");
            assertSameLosses(serial, train(with(common(4, 6), ZERO3_KEPT, List.of("--recompute-granularity", "full",
                    "--recompute-method", "block", "--recompute-num-layers", "1"))), "DP4 ZeRO-3, layer 0 recomputed");
            assertSameLosses(serial, train(with(common(4, 6), ZERO3_KEPT, List.of("--context-parallel-size", "2"))),
                    "CP2 DP2 ZeRO-3, no recompute");
            assertSameLosses(serialMoe, train(with(common(4, 6), moe, ZERO3_KEPT,
                    List.of("--expert-model-parallel-size", "2"))), "EP2 DP4 ZeRO-3, no recompute");
            assertSameLosses(zero2Bf16, train(with(oneMicroBatch, bf16, ZERO3_KEPT)), "DP4 bf16 ZeRO-3 against ZeRO-2");
        } finally {
            PoisoningStorageResize.Provider.enabled = false;
        }
    }

    /**
     * ZeRO-2 and ZeRO-3 with context parallelism (CP2 x DP2) and with experts (EP2 x DP4 over a mixture of 4
     * experts).
     */
    @Test
    void zero2AndZero3GiveTheSerialLossesWithContextAndExpertParallelism() throws Exception {
        List<Double> serial = train(common(1, 4));
        List<String> moe = List.of("--num-experts", "4", "--moe-router-topk", "2", "--moe-grouped-gemm");
        List<Double> serialMoe = train(with(common(1, 4), moe));
        for (List<String> strategy : List.of(ZERO2, ZERO3)) {
            String name = strategy == ZERO2 ? "ZeRO-2" : "ZeRO-3";
            assertSameLosses(serial, train(with(common(4, 4), strategy, List.of("--context-parallel-size", "2"))),
                    "CP2 DP2 " + name);
            assertSameLosses(serialMoe, train(with(common(4, 4), moe, strategy, List.of("--expert-model-parallel-size", "2"))),
                    "EP2 DP4 " + name);
        }
    }

    /**
     * The checkpoint of a ZeRO-2 run is the distributed optimizer's (same optimizer state, keyed by
     * weight): saved at DP4 with ZeRO-2 it resumes at TP2 x DP2 with the distributed optimizer, and the
     * reverse, each with the losses of an uninterrupted run at the resumed layout.
     */
    @Test
    void checkpointsMoveBetweenZero2AtDp4AndTheDistributedOptimizerAtTp2Dp2() throws Exception {
        checkpointsMoveBetween(ZERO2);
    }

    /** The same with ZeRO-3: saved at DP4 it resumes at TP2 x DP2 with the distributed optimizer, and the reverse. */
    @Test
    void checkpointsMoveBetweenZero3AtDp4AndTheDistributedOptimizerAtTp2Dp2() throws Exception {
        checkpointsMoveBetween(ZERO3);
    }

    /** Saves with {@code sharded} at DP4 and resumes at TP2 x DP2 with the distributed optimizer, and the reverse. */
    private void checkpointsMoveBetween(List<String> sharded) throws Exception {
        List<String> tp2 = List.of("--tensor-model-parallel-size", "2", "--use-distributed-optimizer");
        List<List<String>> from = List.of(sharded, tp2);
        List<List<String>> to = List.of(tp2, sharded);
        for (int i = 0; i < 2; i++) {
            Path save = dir.resolve("ckpt-" + System.nanoTime());
            train(with(common(4, 3), from.get(i), List.of("--save", save.toString(), "--save-interval", "3")));
            List<Double> reference = train(with(common(4, 6), to.get(i))).subList(3, 6);
            List<Double> resumed = train(with(common(4, 6), to.get(i), List.of("--load", save.toString())));
            assertSameLosses(reference, resumed, "saved with " + from.get(i) + ", resumed with " + to.get(i));
        }
    }

    @Test
    void theFlagsAreMegatronsAndWhatCannotComposeIsRefused() {
        assertEquals(DataParallelShardingStrategy.NO_SHARD, PretrainArgs.parse("--mock-data", "--use-megatron-fsdp")
                .setup().optimizer().dataParallelShardingStrategy());
        var zero2 = PretrainArgs.parse("--mock-data", "--use-megatron-fsdp", "--data-parallel-sharding-strategy",
                "optim_grads").setup().optimizer();
        assertEquals(DataParallelShardingStrategy.OPTIM_GRADS, zero2.dataParallelShardingStrategy());
        assertTrue(zero2.useDistributedOptimizer(), "optim_grads implies the distributed optimizer");
        assertEquals("pretrain-gpt: --data-parallel-sharding-strategy optim_grads needs --use-megatron-fsdp (not given)",
                refusal("--mock-data", "--data-parallel-sharding-strategy", "optim_grads"));
        assertEquals("pretrain-gpt: --data-parallel-sharding-strategy full_shard is not one of no_shard, optim,"
                + " optim_grads, optim_grads_params", refusal("--mock-data", "--use-megatron-fsdp",
                "--data-parallel-sharding-strategy", "full_shard"));
        assertEquals("pretrain-gpt: --use-megatron-fsdp does not compose with pipeline parallelism"
                + " (--pipeline-model-parallel-size 2), as in Megatron: use 1", refusal("--mock-data", "--nproc", "2",
                "--pipeline-model-parallel-size", "2", "--use-megatron-fsdp"));
        assertTrue(runRefusal(with(common(1, 1), ZERO3_KEPT))
                .startsWith("pretrain-gpt: --data-parallel-sharding-strategy optim_grads_params (ZeRO-3) needs"
                        + " --recompute-granularity full --recompute-method uniform on cpu() (layer 0 of this chunk is not"
                        + " recomputed)"), "without a StorageResize (mcore4j's native library on a CUDA device)");
        assertTrue(refusal(with(List.of("--mock-data"), ZERO3, List.of("--cuda-graph-impl", "local",
                "--cuda-graph-scope", "full_iteration")).toArray(String[]::new))
                .startsWith("pretrain-gpt: --data-parallel-sharding-strategy optim_grads_params (ZeRO-3) does not compose"
                        + " with --cuda-graph-impl local"));
    }
}
