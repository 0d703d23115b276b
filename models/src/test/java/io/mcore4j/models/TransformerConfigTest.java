package io.mcore4j.models;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import io.mcore4j.parallel.ParallelDims;

import io.mcore4j.moe.MoeConfig;
import io.mcore4j.tensorparallel.MlpActivation;
import org.junit.jupiter.api.Test;

class TransformerConfigTest {

    @Test
    void validationNamesTheNumbers() {
        TransformerConfig c = TransformerConfig.builder(6, 60, 6, 1024).build();
        assertEquals("6 attention heads are not divisible by tensor parallel size 4",
                assertThrows(IllegalArgumentException.class, () -> c.validate(ParallelDims.of(4, 4, 1), 0)).getMessage());
        assertEquals("6 layers do not split evenly over 4 pipeline stages x 1 virtual stages",
                assertThrows(IllegalArgumentException.class, () -> c.validate(ParallelDims.of(4, 1, 4), 0)).getMessage());
        assertEquals("4 query groups do not divide 6 attention heads",
                assertThrows(IllegalArgumentException.class,
                        () -> TransformerConfig.builder(6, 60, 6, 1024).queryGroups(4).build()).getMessage());
        TransformerConfig gqa = TransformerConfig.builder(4, 64, 8, 1024).queryGroups(2).build();
        assertEquals("2 query groups are not divisible by tensor parallel size 4",
                assertThrows(IllegalArgumentException.class, () -> gqa.validate(ParallelDims.of(4, 4, 1), 0)).getMessage());
        TransformerConfig sp = TransformerConfig.builder(4, 64, 4, 1024).sequenceParallel(true).build();
        assertEquals("sequence parallelism needs tensor parallel size > 1, got 1",
                assertThrows(IllegalArgumentException.class, () -> sp.validate(ParallelDims.of(1, 1, 1), 0)).getMessage());
        assertEquals("tensor-parallel communication overlap (tp_comm_overlap) needs sequence parallelism, which is off",
                assertThrows(IllegalArgumentException.class,
                        () -> TransformerConfig.builder(4, 64, 4, 1024).tpCommOverlap(true).build()).getMessage());
        assertEquals(true, sp.toBuilder().tpCommOverlap(true).build().toBuilder().build().tpCommOverlap());
    }

    @Test
    void recipesHaveTheirPublishedShapes() {
        TransformerConfig anchor = GptConfigs.gpt1_3b();
        assertEquals(24, anchor.numLayers());
        assertEquals(8192, anchor.ffnHiddenSize());
        // 72 L h^2 + 12 L h s + 6 h V at s = 2048
        assertEquals(72.0 * 24 * 2048 * 2048 + 12.0 * 24 * 2048 * 2048 + 6.0 * 2048 * 32768, anchor.flopsPerToken(2048), 1);
        TransformerConfig llama = GptConfigs.llama7b();
        assertEquals(MlpActivation.SWIGLU, llama.activation());
        assertEquals(128, llama.kvChannels());
        assertEquals(12, GptConfigs.gpt2Small().numLayers());
    }

    /**
     * Megatron's FLOPs accounting of a mixture of experts, by hand: 4 layers (dense, then 3 MoE), h = 64, 8 heads of
     * 8 channels in 2 query groups, SwiGLU, dense ffn 176, 16 experts of ffn 32 with top-2 and a shared expert of 64,
     * vocabulary 512, sequence 128.
     */
    @Test
    void moeFlopsCountTheRoutedTopKAndTheSharedExpertNotTheDenseFfn() {
        TransformerConfig c = moeModel();
        double attention = 4 * (6.0 * (64 * (64 + 2 * 16) + 64 * 64) + 12.0 * 64 * 128); // 4 x 159,744
        double dense = 6.0 * 64 * 3 * 176; // the one dense layer: 202,752
        double moe = 3 * 6.0 * 64 * 3 * (2 * 32 + 64); // top-2 routed experts + shared expert: 3 x 147,456
        double logits = 6.0 * 64 * 512; // 196,608
        assertEquals(1_480_704, attention + dense + moe + logits);
        assertEquals(1_480_704, c.flopsPerToken(128), 1e-6);
    }

    /** 4 layers (a dense one, then 3 of 16 experts top-2 of width 32 with a shared expert of 64), h 64, V 512. */
    private static TransformerConfig moeModel() {
        return TransformerConfig.builder(4, 64, 8, 512).queryGroups(2).kvChannels(8).ffnHiddenSize(176)
                .activation(MlpActivation.SWIGLU)
                .moe(new TransformerConfig.MoeSettings(MoeLayerPattern.parse("[0,1,1,1]"),
                        MoeConfig.builder(16, 2, 32).sharedExpertFfnHiddenSize(64).build()))
                .build();
    }

    /**
     * Megatron-LM's accounting of multi-token prediction: each depth is one more layer of the last layer's kind (here
     * MoE), its norms and projection {@code 6 (3 h + 2 h^2)}, and its logits {@code 6 h V}.
     */
    @Test
    void multiTokenPredictionFlopsCountEachDepthAsALastLayer() {
        TransformerConfig c = moeModel().toBuilder().mtp(new TransformerConfig.MtpSettings(2, 0.1)).build();
        double layer = 6.0 * (64 * (64 + 2 * 16) + 64 * 64) + 12.0 * 64 * 128 + 6.0 * 64 * 3 * (2 * 32 + 64);
        double normsAndProjection = 6.0 * (3 * 64 + 2 * 64 * 64);
        double logits = 6.0 * 64 * 512;
        assertEquals(1_480_704 + 2 * (layer + normsAndProjection + logits), c.flopsPerToken(128), 1e-6);
    }

    /** Megatron-LM's accounting of multi-latent attention: its projections and latent norms, then the core attention. */
    @Test
    void multiLatentAttentionFlopsCountTheLatentsProjections() {
        TransformerConfig c = TransformerConfig.builder(1, 64, 4, 100).ffnHiddenSize(96).activation(MlpActivation.SWIGLU)
                .normalization(TransformerConfig.Normalization.RMS_NORM, 1e-6)
                .positionEmbedding(TransformerConfig.PositionEmbedding.ROPE)
                .multiLatentAttention(new TransformerConfig.MlaDims(32, 16, 16, 8, 16)).build();
        double queries = 32 * (64 + 4 * 24 + 1); // down, norm, up: 5,152
        double keysValues = 16 * (64 + 4 * 32 + 1) + 64 * 8; // latent down, norm, up, and the rotated key: 3,600
        double out = 4 * 16 * 64; // 4,096
        double core = 6.0 * 128 * 4 * (24 + 16); // scores over 24 channels, values of 16: 122,880
        double attention = 6 * (queries + keysValues + out) + core;
        assertEquals(199_968, attention);
        assertEquals(199_968 + 6.0 * 64 * 3 * 96 + 6.0 * 64 * 100, c.flopsPerToken(128), 1e-6);
    }

    /** YaRN's two factors and what multi-latent attention and YaRN refuse, each naming the value. */
    @Test
    void yarnFactorsAndMultiLatentAttentionRules() {
        TransformerConfig.RopeScaling yarn = TransformerConfig.RopeScaling.yarn(4, 64, 32, 1, 1, 0.8);
        double m1 = 0.1 * Math.log(4) + 1;
        double m08 = 0.08 * Math.log(4) + 1;
        assertEquals(m1 / m08, yarn.attentionFactor(), 1e-15);
        assertEquals(m08 * m08, yarn.softmaxScaleFactor(), 1e-15);
        assertEquals(1, TransformerConfig.RopeScaling.linear(2).softmaxScaleFactor());
        assertEquals(1, TransformerConfig.RopeScaling.yarnMscale(1, 0.7));
        assertThrows(IllegalArgumentException.class, () -> TransformerConfig.RopeScaling.yarn(4, 64, 1, 32, 1, 0));
        TransformerConfig.Builder b = TransformerConfig.builder(1, 64, 4, 100)
                .positionEmbedding(TransformerConfig.PositionEmbedding.ROPE);
        IllegalArgumentException noMla = assertThrows(IllegalArgumentException.class, () -> b.ropeScaling(yarn).build());
        assertEquals("yarn rope scaling is implemented for multi-latent attention only", noMla.getMessage());
        b.ropeScaling(null).multiLatentAttention(new TransformerConfig.MlaDims(0, 16, 16, 8, 16));
        IllegalArgumentException qkNorm = assertThrows(IllegalArgumentException.class, () -> b.qkLayernorm(true).build());
        org.junit.jupiter.api.Assertions.assertTrue(qkNorm.getMessage().contains("qk layernorm true"), qkNorm.getMessage());
        IllegalArgumentException odd = assertThrows(IllegalArgumentException.class,
                () -> new TransformerConfig.MlaDims(0, 16, 16, 7, 16));
        assertEquals("qk_pos_emb_head_dim 7 must be even and at least 2 (RoPE rotates pairs of channels)", odd.getMessage());
    }
}
