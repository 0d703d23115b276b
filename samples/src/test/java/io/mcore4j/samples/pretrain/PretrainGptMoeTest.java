package io.mcore4j.samples.pretrain;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.mcore4j.models.MoeLayerPattern;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.moe.MoeConfig;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.stream.Stream;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Issue #34's MoE flags on pretrain-gpt, under Megatron-LM's names: what each sets in the GPT model's MoE settings,
 * Megatron's defaults, the one line with exit 2 of each refused value, and a GPT whose MoE layers use the new
 * options training to the serial losses at EP2 x TP2.
 */
class PretrainGptMoeTest {
    @TempDir
    Path dir;

    private static final List<String> BASE = List.of("--num-layers", "4", "--hidden-size", "32", "--num-attention-heads", "4",
            "--seq-length", "16", "--micro-batch-size", "2", "--global-batch-size", "4", "--mock-data", "--vocab-size", "250",
            "--make-vocab-size-divisible-by", "64", "--num-experts", "8");

    private static TransformerConfig.MoeSettings moe(String... more) {
        return PretrainArgs.parse(Stream.concat(BASE.stream(), Arrays.stream(more)).toArray(String[]::new)).setup()
                .model().moe();
    }

    /** The line pretrain-gpt refuses these flags with (exit 2), after its "pretrain-gpt: ". */
    private static String refusal(String... more) {
        return PretrainRuns.refusal(Stream.concat(BASE.stream(), Arrays.stream(more)).toList())
                .substring("pretrain-gpt: ".length());
    }

    @Test
    void everyRouterAndExpertFlagReachesTheModel() {
        TransformerConfig.MoeSettings s = moe("--moe-router-score-function", "sigmoid", "--moe-router-enable-expert-bias",
                "--moe-router-bias-update-rate", "0.01", "--moe-router-num-groups", "4", "--moe-router-group-topk", "2",
                "--moe-router-topk", "4", "--moe-router-topk-scaling-factor", "2.5",
                "--moe-router-load-balancing-type", "seq_aux_loss", "global_aux_loss", "--moe-aux-loss-coeff", "1e-3", "1e-4",
                "--moe-z-loss-coeff", "1e-3", "--moe-shared-expert-intermediate-size", "48",
                "--moe-expert-capacity-factor", "1.25", "--moe-pad-expert-input-to-capacity", "--moe-token-drop-policy",
                "position", "--moe-layer-freq", "([0]*1+[1]*3)", "--moe-router-dtype", "fp32", "--moe-input-jitter-eps",
                "0.01", "--moe-ffn-hidden-size", "24", "--moe-token-dispatcher-type", "alltoall",
                "--moe-shared-expert-overlap");
        MoeConfig c = s.config();
        assertEquals(MoeLayerPattern.of(List.of(0, 1, 1, 1)), s.layers());
        assertEquals(MoeConfig.RouterScore.SIGMOID, c.routerScore());
        assertTrue(c.auxLossFree());
        assertEquals(0.01, c.biasUpdateRate());
        assertEquals(4, c.numGroups());
        assertEquals(2, c.groupTopK());
        assertEquals(4, c.topK());
        assertEquals(2.5, c.topKScalingFactor());
        assertEquals(0, c.auxLossCoeff());
        assertEquals(1e-3, c.seqAuxLossCoeff());
        assertEquals(1e-4, c.globalAuxLossCoeff());
        assertEquals(1e-3, c.zLossCoeff());
        assertEquals(48, c.sharedExpertFfnHiddenSize());
        assertEquals(1.25, c.capacityFactor());
        assertTrue(c.padToCapacity());
        assertEquals(MoeConfig.DropPolicy.POSITION, c.dropPolicy());
        assertTrue(c.routerInFp32());
        assertEquals(0.01, c.inputJitter());
        assertEquals(24, c.ffnHiddenSize());
        assertEquals(MoeConfig.Dispatcher.ALL_TO_ALL, c.dispatcher());
        assertTrue(c.sharedExpertOverlap());
        assertTrue(moe("--moe-router-pre-softmax", "--moe-router-topk", "1").config().preSoftmax());
        assertEquals(MoeLayerPattern.every(2), moe("--moe-layer-freq", "2").layers());
        assertEquals(0, moe("--moe-expert-capacity-factor", "-1").config().capacityFactor(), "negative: none, as in Megatron");
        assertTrue(moe("--moe-router-force-load-balancing").config().forceLoadBalancing());
    }

    @Test
    void megatronsDefaults() {
        MoeConfig c = moe().config();
        assertEquals(MoeConfig.builder(8, 2, 128).dispatcher(MoeConfig.Dispatcher.ALL_GATHER).outputInitStd(0.02 / Math.sqrt(8))
                .addBias(true)
                .build(), c, "softmax after the top-2, no losses, no groups, no scaling, dropless, no shared expert, fp32 off");
        assertEquals(MoeLayerPattern.every(1), moe().layers());
        assertEquals(1e-3, c.biasUpdateRate());
        assertFalse(c.routerInFp32());
    }

    @Test
    void refusedValuesNameTheFlag() {
        assertEquals("--moe-router-score-function sqrtsoftplus is not one of softmax, sigmoid (mcore4j has no sqrtsoftplus"
                + " scores)", refusal("--moe-router-score-function", "sqrtsoftplus"));
        assertEquals("--moe-router-enable-expert-bias (aux-loss-free routing) needs --moe-router-score-function sigmoid,"
                + " not softmax", refusal("--moe-router-enable-expert-bias"));
        assertEquals("--moe-router-group-topk 2 needs --moe-router-num-groups", refusal("--moe-router-group-topk", "2"));
        assertEquals("--moe-router-num-groups 4 has no effect without --moe-router-group-topk",
                refusal("--moe-router-num-groups", "4"));
        assertEquals("--moe-router-num-groups 3 must divide --num-experts 8",
                refusal("--moe-router-num-groups", "3", "--moe-router-group-topk", "1"));
        assertEquals("--moe-router-group-topk 3 must be from 1 to --moe-router-num-groups 4 and at most --moe-router-topk 2",
                refusal("--moe-router-num-groups", "4", "--moe-router-group-topk", "3"));
        assertEquals("--moe-router-topk 4 exceeds the 2 experts of --moe-router-group-topk 1 groups",
                refusal("--moe-router-num-groups", "4", "--moe-router-group-topk", "1", "--moe-router-topk", "4"));
        assertEquals("--moe-router-topk-scaling-factor 0.0 must be a finite number > 0 (leave the flag out for none)",
                refusal("--moe-router-topk-scaling-factor", "0"));
        assertEquals("--moe-router-load-balancing-type quantile_balancing: mcore4j implements aux_loss, seq_aux_loss,"
                + " global_aux_loss and none", refusal("--moe-router-load-balancing-type", "quantile_balancing"));
        assertEquals("--moe-aux-loss-coeff gives 1 coefficients for the 2 types of --moe-router-load-balancing-type aux_loss"
                + " seq_aux_loss", refusal("--moe-router-load-balancing-type", "aux_loss", "seq_aux_loss",
                "--moe-aux-loss-coeff", "0.01"));
        assertEquals("--moe-z-loss-coeff -1.0 must be a finite number, at least 0", refusal("--moe-z-loss-coeff", "-1"));
        assertEquals("--moe-router-dtype fp64 is not fp32 (mcore4j routes in float32 at most)",
                refusal("--moe-router-dtype", "fp64"));
        assertEquals("--moe-pad-expert-input-to-capacity needs --moe-expert-capacity-factor",
                refusal("--moe-pad-expert-input-to-capacity"));
        assertEquals("--moe-token-drop-policy random is not one of probs, position", refusal("--moe-token-drop-policy", "random"));
        assertEquals("--moe-shared-expert-intermediate-size 0 must be at least 1 (the shared experts' total width)",
                refusal("--moe-shared-expert-intermediate-size", "0"));
        assertEquals("--moe-shared-expert-overlap works with --moe-token-dispatcher-type alltoall only, not allgather",
                refusal("--moe-shared-expert-intermediate-size", "16", "--moe-shared-expert-overlap"));
        assertEquals("--moe-router-topk 1 with the softmax after the top-k gives the router no gradient: add"
                + " --moe-router-pre-softmax", refusal("--moe-router-topk", "1"));
        assertEquals("--moe-layer-freq [0,1] has 2 entries for --num-layers 4 (one 0 or 1 per layer)",
                refusal("--moe-layer-freq", "[0,1]"));
        assertEquals("--moe-layer-freq ([0]*1+[1]*3: expected ')' at position 12 of ([0]*1+[1]*3",
                refusal("--moe-layer-freq", "([0]*1+[1]*3"));
    }

    /**
     * EP2 x TP2 (x DP2, sequence parallel) trains to the serial run's losses, step by step, with a dense first layer
     * and two MoE layers that route by sigmoid scores with an expert bias (updated after every step from the
     * step's token counts over TP x DP), group-limited top-2 and top-k scaling in float32, balance by the aux,
     * sequence-aux and z-losses, add a shared expert, and run grouped GEMMs and fused permutations over the
     * all-to-all dispatcher, the shared expert's forward overlapping the dispatch ({@code --moe-shared-expert-overlap}, on the
     * parallel run). (Options that depend on the layout by Megatron's definition are left out: capacity is
     * per rank's tokens, the global aux loss averages the micro-batches a rank sees, input jitter draws per rank.)
     */
    @Test
    void ep2Tp2GivesTheSerialLossesWithTheNewRoutingOptions() throws Exception {
        List<String> moe = List.of("--num-layers", "3", "--hidden-size", "32", "--num-attention-heads", "4",
                "--seq-length", "16", "--micro-batch-size", "2", "--global-batch-size", "8", "--mock-data", "--vocab-size",
                "250", "--make-vocab-size-divisible-by", "64", "--lr", "1e-3", "--min-lr", "1e-4", "--lr-warmup-iters", "2",
                "--train-iters", "5", "--log-interval", "5", "--seed", "7", "--clip-grad", "1.0",
                "--num-experts", "4", "--moe-layer-freq", "([0]*1+[1]*2)", "--moe-router-score-function", "sigmoid",
                "--moe-router-enable-expert-bias", "--moe-router-bias-update-rate", "0.01", "--moe-router-num-groups", "2",
                "--moe-router-group-topk", "1", "--moe-router-topk-scaling-factor", "2.0", "--moe-router-dtype", "fp32",
                "--moe-router-load-balancing-type", "aux_loss", "seq_aux_loss", "--moe-aux-loss-coeff", "0.01", "0.005",
                "--moe-z-loss-coeff", "0.001", "--moe-shared-expert-intermediate-size", "64", "--moe-grouped-gemm",
                "--moe-permute-fusion", "--moe-token-dispatcher-type", "alltoall");
        List<Double> serial = train(moe, "--nproc", "1");
        assertEquals(5, serial.size());
        assertTrue(serial.get(4) < serial.get(0), "the loss should fall: " + serial);
        List<Double> parallel = train(moe, "--nproc", "4", "--tensor-model-parallel-size", "2",
                "--expert-model-parallel-size", "2", "--sequence-parallel", "--moe-shared-expert-overlap");
        PretrainRuns.assertSameLosses(serial, parallel, "EP2 x TP2 x DP2 + SP, the shared expert overlapped");
    }

    private List<Double> train(List<String> flags, String... layout) throws Exception {
        List<String> f = new ArrayList<>(flags);
        f.addAll(List.of(layout));
        f.addAll(List.of("--metrics-dir", dir.resolve("metrics-" + System.nanoTime()).toString()));
        return PretrainRuns.train(f);
    }
}
