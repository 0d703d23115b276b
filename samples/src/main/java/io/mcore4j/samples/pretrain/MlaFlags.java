package io.mcore4j.samples.pretrain;

import io.mcore4j.models.TransformerConfig;
import picocli.CommandLine.Option;

import java.util.ArrayList;
import java.util.List;

/**
 * The {@code pretrain-gpt} flags of multi-latent attention (DeepSeek-V2/V3) and its YaRN rope scaling, with
 * Megatron-LM's names and defaults: {@code --multi-latent-attention}, {@code --q-lora-rank}, {@code --kv-lora-rank},
 * {@code --qk-head-dim}, {@code --qk-pos-emb-head-dim}, {@code --v-head-dim}, {@code --rope-type},
 * {@code --rotary-scaling-factor}, {@code --mscale}, {@code --mscale-all-dim}; YaRN's other fields of Megatron-Core's
 * {@code MLATransformerConfig} as mcore4j's flags. A picocli mixin of {@link PretrainArgs}; validation raises
 * {@link IllegalArgumentException} with one line naming the flag.
 */
public final class MlaFlags {
    /** Megatron-LM's {@code --rope-type} choices. */
    public enum RopeType { rope, yarn }

    @Option(names = "--multi-latent-attention", description = "Multi-latent attention (DeepSeek-V2/V3) in every layer"
            + " instead of grouped-query self-attention; needs --position-embedding-type rope.")
    boolean multiLatentAttention;
    @Option(names = "--q-lora-rank", description = "Width of the queries' latent (0 or absent: queries projected from the"
            + " hidden states directly, Megatron's None).")
    Integer qLoraRank;
    @Option(names = "--kv-lora-rank", description = "Width of the keys' and values' latent. Default: 32.")
    Integer kvLoraRank;
    @Option(names = "--qk-head-dim", description = "Channels per query and key head that do not rotate. Default: 128.")
    Integer qkHeadDim;
    @Option(names = "--qk-pos-emb-head-dim", description = "Channels per query and key head that rotate. Default: 64.")
    Integer qkPosEmbHeadDim;
    @Option(names = "--v-head-dim", description = "Channels per value head. Default: 128.")
    Integer vHeadDim;
    @Option(names = "--rope-type", description = "rope or yarn (Megatron's meaning: multi-latent attention takes yarn"
            + " by default, which with --rotary-scaling-factor 1 is plain RoPE). yarn is implemented for multi-latent"
            + " attention only.")
    RopeType ropeType;
    @Option(names = "--rotary-scaling-factor", description = "YaRN's scaling factor. Default: 1.0.")
    Double rotaryScalingFactor;
    @Option(names = "--mscale", description = "YaRN's mscale of the cos/sin factor. Default: 1.0.")
    Double mscale;
    @Option(names = "--mscale-all-dim", description = "YaRN's mscale_all_dim (of the cos/sin factor and of multi-latent"
            + " attention's softmax scale). Default: 0.0.")
    Double mscaleAllDim;
    @Option(names = "--original-max-position-embeddings", description = "YaRN: the context length the model was"
            + " pre-trained with (Megatron-Core's original_max_position_embeddings). mcore4j's flag. Default: 4096.")
    Integer originalMaxPositionEmbeddings;
    @Option(names = "--beta-fast", description = "YaRN's beta_fast (Megatron-Core's). mcore4j's flag. Default: 32.")
    Double betaFast;
    @Option(names = "--beta-slow", description = "YaRN's beta_slow (Megatron-Core's). mcore4j's flag. Default: 1.")
    Double betaSlow;

    /**
     * Sets the flags' options on a model built from flags.
     *
     * @param b the model being built
     * @param rope whether {@code --position-embedding-type rope} was given
     * @throws IllegalArgumentException naming the flag whose value cannot be honoured
     */
    void apply(TransformerConfig.Builder b, boolean rope) {
        if (!multiLatentAttention) {
            List<String> given = given();
            if (!given.isEmpty()) {
                throw new IllegalArgumentException(String.join(", ", given) + " "
                        + (given.size() == 1 ? "applies" : "apply") + " to multi-latent attention: add"
                        + " --multi-latent-attention");
            }
            return;
        }
        if (!rope) {
            throw new IllegalArgumentException("--multi-latent-attention rotates part of every head: it needs"
                    + " --position-embedding-type rope");
        }
        int q = qLoraRank == null ? 0 : qLoraRank;
        try {
            b.multiLatentAttention(new TransformerConfig.MlaDims(q, orDefault(kvLoraRank, 32), orDefault(qkHeadDim, 128),
                    orDefault(qkPosEmbHeadDim, 64), orDefault(vHeadDim, 128)));
        } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException("--q-lora-rank/--kv-lora-rank/--qk-head-dim/--qk-pos-emb-head-dim/"
                    + "--v-head-dim: " + e.getMessage(), e);
        }
        double factor = rotaryScalingFactor == null ? 1 : rotaryScalingFactor;
        if (!(factor > 0)) {
            throw new IllegalArgumentException("--rotary-scaling-factor " + factor + " must be positive");
        }
        if (ropeType == RopeType.rope) {
            List<String> yarn = yarnGiven();
            if (!yarn.isEmpty()) {
                throw new IllegalArgumentException(String.join(", ", yarn) + " with --rope-type rope: YaRN's flags need"
                        + " --rope-type yarn");
            }
            return;
        }
        if (factor == 1) {
            return; // YaRN with factor 1 is RoPE: the frequencies and both mscale factors are unchanged
        }
        try {
            b.ropeScaling(TransformerConfig.RopeScaling.yarn(factor, orDefault(originalMaxPositionEmbeddings, 4096),
                    betaFast == null ? 32 : betaFast, betaSlow == null ? 1 : betaSlow, mscale == null ? 1 : mscale,
                    mscaleAllDim == null ? 0 : mscaleAllDim));
        } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException("--rope-type yarn: " + e.getMessage(), e);
        }
    }

    /** With {@code --load-hf} the attention comes from the checkpoint's config: every flag here is refused. */
    void refuseWithLoadHf(String flag) {
        List<String> given = given();
        if (multiLatentAttention) {
            given.add(0, "--multi-latent-attention");
        }
        if (!given.isEmpty()) {
            throw new IllegalArgumentException(String.join(", ", given) + " with " + flag + ": the attention comes from"
                    + " the checkpoint's config.json; drop the flag");
        }
    }

    private List<String> given() {
        List<String> out = new ArrayList<>();
        add(out, "--q-lora-rank", qLoraRank);
        add(out, "--kv-lora-rank", kvLoraRank);
        add(out, "--qk-head-dim", qkHeadDim);
        add(out, "--qk-pos-emb-head-dim", qkPosEmbHeadDim);
        add(out, "--v-head-dim", vHeadDim);
        if (ropeType == RopeType.yarn) {
            out.add("--rope-type yarn");
        }
        out.addAll(yarnGiven());
        return out;
    }

    private List<String> yarnGiven() {
        List<String> out = new ArrayList<>();
        add(out, "--rotary-scaling-factor", rotaryScalingFactor);
        add(out, "--mscale", mscale);
        add(out, "--mscale-all-dim", mscaleAllDim);
        add(out, "--original-max-position-embeddings", originalMaxPositionEmbeddings);
        add(out, "--beta-fast", betaFast);
        add(out, "--beta-slow", betaSlow);
        return out;
    }

    private static void add(List<String> out, String flag, Object value) {
        if (value != null) {
            out.add(flag + " " + value);
        }
    }

    private static int orDefault(Integer value, int fallback) {
        return value == null ? fallback : value;
    }
}
