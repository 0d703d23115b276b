package io.mcore4j.samples.pretrain;

import io.mcore4j.hf.HfConfig;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.tensorparallel.MlpActivation;
import picocli.CommandLine.Option;

import java.util.ArrayList;
import java.util.List;

/**
 * The {@code pretrain-gpt} flags that vary the transformer layer beyond Megatron-LM's GPT script: sliding-window
 * attention ({@code --window-size}, {@code --window-attn-skip-freq}) and zero-centred norms
 * ({@code --apply-layernorm-1p}) with Megatron's names and meanings, and, without a Megatron-LM flag, Megatron-Core's
 * options Gemma needs (norms after the attention and the MLP, GeGLU, scaled embeddings, a softmax scale, a rotary base
 * of the windowed layers). A picocli mixin of {@link PretrainArgs}; validation raises
 * {@link IllegalArgumentException} with one line naming the flag.
 */
public final class LayerVariantFlags {
    @Option(names = "--window-size", paramLabel = "LEFT,RIGHT", description = "Sliding-window attention (Megatron's"
            + " window_size): a query attends the LEFT tokens before it and itself; RIGHT must be 0 (causal). Default: none.")
    String windowSize;
    @Option(names = "--window-attn-skip-freq", paramLabel = "N|PATTERN", description = "With --window-size, the layers"
            + " that attend the whole sequence instead (Megatron's meaning): every N-th layer, or a list expression of"
            + " 1 (window) and 0 (whole sequence) per layer such as \"([1]*5+[0])*2\". Default: every layer windowed.")
    String windowAttnSkipFreq;
    @Option(names = "--apply-layernorm-1p", description = "Zero-centred norm weights (Megatron's meaning,"
            + " layernorm_zero_centered_gamma): every norm's weight starts at 0 and scales by 1 + weight.")
    boolean applyLayernorm1p;
    @Option(names = "--post-self-attn-layernorm", description = "A norm on the attention's output before its residual add"
            + " (Megatron-Core's post_self_attn_layernorm; Gemma 2/3). mcore4j's flag.")
    boolean postSelfAttnLayernorm;
    @Option(names = "--post-mlp-layernorm", description = "A norm on the MLP's output before its residual add"
            + " (Megatron-Core's post_mlp_layernorm; Gemma 2/3). mcore4j's flag.")
    boolean postMlpLayernorm;
    @Option(names = "--geglu", description = "GeGLU MLP: the tanh GELU of a gate times an up projection (Gemma). mcore4j's"
            + " flag; excludes --swiglu.")
    boolean geglu;
    @Option(names = "--scale-embeddings-by-sqrt-hidden", description = "Multiply the word embeddings by sqrt(--hidden-size),"
            + " rounded to the parameter dtype (Gemma). mcore4j's flag.")
    boolean scaleEmbeddings;
    @Option(names = "--softmax-scale", description = "Scale of the attention scores (Megatron-Core's softmax_scale; Gemma's"
            + " query_pre_attn_scalar^-1/2). mcore4j's flag. Default: 1 / sqrt(--kv-channels).")
    Double softmaxScale;
    @Option(names = "--local-rotary-base", description = "RoPE base of the --window-size layers, which then rotate without"
            + " rope scaling (Gemma 3's rope_local_base_freq). mcore4j's flag. Default: --rotary-base.")
    Double localRotaryBase;

    /**
     * Sets the flags' options on a model built from flags.
     *
     * @param b the model being built (its layers already set)
     * @param layers the model's layers
     * @param swiglu whether {@code --swiglu} was given
     * @throws IllegalArgumentException naming the flag whose value cannot be honoured
     */
    void apply(TransformerConfig.Builder b, int layers, boolean swiglu) {
        if (geglu && swiglu) {
            throw new IllegalArgumentException("--geglu and --swiglu exclude each other (give one)");
        }
        if (geglu) {
            b.activation(MlpActivation.GEGLU_TANH);
        }
        b.slidingWindow(slidingWindow(layers)).layernormZeroCenteredGamma(applyLayernorm1p)
                .postLayernorms(postSelfAttnLayernorm, postMlpLayernorm).scaleEmbeddingsBySqrtHidden(scaleEmbeddings);
        if (softmaxScale != null) {
            if (!(softmaxScale > 0) || softmaxScale.isInfinite()) {
                throw new IllegalArgumentException("--softmax-scale " + softmaxScale + " must be a positive finite number");
            }
            b.softmaxScale(softmaxScale);
        }
        if (localRotaryBase != null) {
            if (!(localRotaryBase > 0) || localRotaryBase.isInfinite()) {
                throw new IllegalArgumentException("--local-rotary-base " + localRotaryBase + " must be a positive finite number");
            }
            if (windowSize == null) {
                throw new IllegalArgumentException("--local-rotary-base " + localRotaryBase + " is the RoPE base of the"
                        + " --window-size layers: it needs --window-size");
            }
            b.localRotaryBase(localRotaryBase);
        }
    }

    /**
     * With {@code --load-hf} the model comes from its {@code config.json}: a flag given here that the model does not
     * have is refused rather than ignored.
     *
     * @param hf the checkpoint's config
     * @param flag the {@code --load-hf} flag and value, for the message
     * @throws IllegalArgumentException naming the flag
     */
    void checkAgainst(HfConfig hf, String flag) {
        TransformerConfig c = hf.transformerConfig();
        List<String> disagree = new ArrayList<>();
        agree(disagree, "--apply-layernorm-1p", applyLayernorm1p, c.layernormZeroCenteredGamma());
        agree(disagree, "--post-self-attn-layernorm", postSelfAttnLayernorm, c.postSelfAttnLayernorm());
        agree(disagree, "--post-mlp-layernorm", postMlpLayernorm, c.postMlpLayernorm());
        agree(disagree, "--geglu", geglu, c.activation() == MlpActivation.GEGLU_TANH);
        agree(disagree, "--scale-embeddings-by-sqrt-hidden", scaleEmbeddings, c.scaleEmbeddingsBySqrtHidden());
        if (windowSize != null) {
            TransformerConfig.SlidingWindow given = slidingWindow(c.numLayers());
            for (int i = 0; i < c.numLayers(); i++) {
                if ((given.appliesTo(i) ? given.size() : -1) != c.windowSize(i)) {
                    disagree.add("--window-size " + windowSize + (windowAttnSkipFreq != null ? " --window-attn-skip-freq "
                            + windowAttnSkipFreq : "") + " (layer " + i + ")");
                    break;
                }
            }
        }
        double scale = c.softmaxScale() > 0 ? c.softmaxScale() : 1 / Math.sqrt(c.kvChannels());
        if (softmaxScale != null && Math.abs(softmaxScale - scale) > 1e-9 * scale) {
            disagree.add("--softmax-scale " + softmaxScale + " (the model's: " + scale + ")");
        }
        if (localRotaryBase != null && localRotaryBase != c.localRotaryBase()) {
            disagree.add("--local-rotary-base " + localRotaryBase);
        }
        if (!disagree.isEmpty()) {
            throw new IllegalArgumentException(String.join(", ", disagree) + " with " + flag + ": the model comes from its"
                    + " config.json (" + hf.architecture().className() + "), which disagrees; drop the flag");
        }
    }

    private static void agree(List<String> disagree, String flag, boolean given, boolean has) {
        if (given && !has) {
            disagree.add(flag);
        }
    }

    /** {@code --window-size} with {@code --window-attn-skip-freq}, or null. */
    private TransformerConfig.SlidingWindow slidingWindow(int layers) {
        if (windowSize == null) {
            if (windowAttnSkipFreq != null) {
                throw new IllegalArgumentException("--window-attn-skip-freq " + windowAttnSkipFreq + " needs --window-size");
            }
            return null;
        }
        String[] parts = windowSize.replace("(", "").replace(")", "").split(",", -1);
        int left;
        int right;
        try {
            left = Integer.parseInt(parts[0].trim());
            right = parts.length == 2 ? Integer.parseInt(parts[1].trim()) : Integer.MIN_VALUE;
        } catch (NumberFormatException e) {
            left = -1;
            right = Integer.MIN_VALUE;
        }
        if (parts.length != 2 || left < 0 || right == Integer.MIN_VALUE) {
            throw new IllegalArgumentException("--window-size " + windowSize + ": expected LEFT,RIGHT (Megatron's window_size"
                    + " pair), e.g. 4095,0");
        }
        if (right != 0) {
            throw new IllegalArgumentException("--window-size " + windowSize + ": only causal windows (RIGHT 0) are"
                    + " implemented");
        }
        if (windowAttnSkipFreq == null) {
            return TransformerConfig.SlidingWindow.everyLayer(left);
        }
        if (windowAttnSkipFreq.trim().matches("\\d+")) {
            int every = Integer.parseInt(windowAttnSkipFreq.trim());
            if (every < 1) {
                throw new IllegalArgumentException("--window-attn-skip-freq " + every + " must be at least 1");
            }
            return new TransformerConfig.SlidingWindow(left, every, List.of());
        }
        List<Integer> pattern = LayerPatternExpression.evaluate("--window-attn-skip-freq", windowAttnSkipFreq);
        List<Boolean> windowed = new ArrayList<>();
        for (int v : pattern) {
            if (v != 0 && v != 1) {
                throw new IllegalArgumentException("--window-attn-skip-freq " + windowAttnSkipFreq + ": entries are 1"
                        + " (window) or 0 (whole sequence), got " + v);
            }
            windowed.add(v == 1);
        }
        if (windowed.size() != layers) {
            throw new IllegalArgumentException("--window-attn-skip-freq " + windowAttnSkipFreq + " has " + windowed.size()
                    + " entries for " + layers + " layers");
        }
        return new TransformerConfig.SlidingWindow(left, 0, windowed);
    }
}
