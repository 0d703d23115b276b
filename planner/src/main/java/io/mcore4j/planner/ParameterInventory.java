package io.mcore4j.planner;

import io.mcore4j.models.TransformerConfig;
import io.mcore4j.pipeline.LayerAssignment;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

/**
 * The parameter tensors one rank of a layout holds, by pipeline stage, without allocating them: the
 * local shapes {@code GptModel}, {@code TransformerLayer}, {@code SelfAttention}, {@code ParallelMlp},
 * {@code Norm}, the parallel linears and the experts give their weights (column-parallel rows and
 * row-parallel columns split over TP, the vocabulary over TP, experts over EP and expert-TP, norms
 * and row-parallel biases whole). Layers go to stages as {@code GptTrainingModel} assigns them
 * ({@link LayerAssignment#even}). {@code ParameterInventoryTest} builds the real models at several
 * layouts and checks every rank's element counts against this inventory, so the two cannot drift
 * apart unnoticed.
 */
public final class ParameterInventory {

    /**
     * One parameter tensor of a rank.
     *
     * @param key its checkpoint key (as the model names it)
     * @param numel elements on this rank
     * @param expert whether it is an expert weight (reduced over expert-DP, not DP x CP)
     */
    public record Tensor(String key, long numel, boolean expert) {}

    private ParameterInventory() {}

    /**
     * The parameters of one pipeline rank (all its virtual chunks).
     *
     * @param c the model as built for the layout (padded vocabulary)
     * @param layout the layout (TP, PP, VP, EP; expert-TP equals TP as Megatron-Core's default)
     * @param stage the pipeline rank
     * @return the tensors, never empty
     */
    public static List<Tensor> stage(TransformerConfig c, Layout layout, int stage) {
        int tp = layout.tensorParallel();
        int pp = layout.pipelineParallel();
        int vp = layout.virtualStages();
        LayerAssignment assignment = LayerAssignment.even(c.numLayers(), pp, vp);
        List<Tensor> out = new ArrayList<>();
        long h = c.hiddenSize();
        long vocabPerRank = c.vocabSize() / tp;
        for (int chunk = 0; chunk < vp; chunk++) {
            boolean first = stage == 0 && chunk == 0;
            boolean last = stage == pp - 1 && chunk == vp - 1;
            if (first) {
                out.add(new Tensor("embedding.word_embeddings.weight", vocabPerRank * h, false));
                if (!c.usesRope()) {
                    out.add(new Tensor("embedding.position_embeddings.weight", (long) c.maxSequenceLength() * h, false));
                }
            }
            for (int layer : assignment.layers(stage, chunk)) {
                layer(c, layout, layer, out);
            }
            if (last) {
                norm(c, "decoder.final_layernorm.", out);
                // tied weights: the output layer reuses the embedding on the same chunk, else holds a copy
                if (!c.tiedEmbeddings() || !first) {
                    out.add(new Tensor(c.tiedEmbeddings() ? "embedding.word_embeddings.weight" : "output_layer.weight",
                            vocabPerRank * h, false));
                }
            }
        }
        return Collections.unmodifiableList(out);
    }

    /** The grouped-query self-attention's tensors under {@code key} ({@code ...self_attention.}). */
    private static void selfAttention(TransformerConfig c, int tp, String key, List<Tensor> out) {
        long h = c.hiddenSize();
        long qkv = (long) (c.numAttentionHeads() + 2 * c.numQueryGroups()) * c.kvChannels() / tp;
        out.add(new Tensor(key + "linear_qkv.weight", qkv * h, false));
        if (c.addBiasLinear() || c.addQkvBias()) {
            out.add(new Tensor(key + "linear_qkv.bias", qkv, false));
        }
        if (c.qkLayernorm()) {
            for (String qk : new String[] {"q_layernorm.", "k_layernorm."}) {
                norm(c, key + qk, c.kvChannels(), out);
            }
        }
        long projIn = (long) c.numAttentionHeads() * c.kvChannels() / tp;
        out.add(new Tensor(key + "linear_proj.weight", projIn * h, false));
        if (c.addBiasLinear()) {
            out.add(new Tensor(key + "linear_proj.bias", h, false));
        }
    }

    /**
     * Multi-latent attention's tensors under {@code key}: the down-projections column-parallel (rows over TP, their
     * outputs gathered), the up-projections column-parallel by heads, {@code linear_proj} row-parallel, the latents'
     * norms whole.
     */
    private static void multiLatentAttention(TransformerConfig c, int tp, String key, List<Tensor> out) {
        TransformerConfig.MlaDims d = c.multiLatentAttention();
        long h = c.hiddenSize();
        long heads = c.numAttentionHeads();
        if (d.compressesQueries()) {
            out.add(new Tensor(key + "linear_q_down_proj.weight", d.qLoraRank() / tp * h, false));
            norm(c, key + "q_layernorm.", d.qLoraRank(), out);
            out.add(new Tensor(key + "linear_q_up_proj.weight", heads * d.queryKeyWidth() / tp * d.qLoraRank(), false));
        } else {
            out.add(new Tensor(key + "linear_q_proj.weight", heads * d.queryKeyWidth() / tp * h, false));
        }
        out.add(new Tensor(key + "linear_kv_down_proj.weight", (d.kvLoraRank() + d.qkPosEmbHeadDim()) / tp * h, false));
        norm(c, key + "kv_layernorm.", d.kvLoraRank(), out);
        out.add(new Tensor(key + "linear_kv_up_proj.weight", heads * (d.qkHeadDim() + d.vHeadDim()) / tp * d.kvLoraRank(),
                false));
        out.add(new Tensor(key + "linear_proj.weight", h * (heads * d.vHeadDim() / tp), false));
    }

    private static void layer(TransformerConfig c, Layout layout, int n, List<Tensor> out) {
        int tp = layout.tensorParallel();
        String key = "decoder.layers." + n + ".";
        long h = c.hiddenSize();
        norm(c, key + "input_layernorm.", out);
        if (c.multiLatentAttention() != null) {
            multiLatentAttention(c, tp, key + "self_attention.", out);
        } else {
            selfAttention(c, tp, key + "self_attention.", out);
        }
        if (c.postSelfAttnLayernorm()) {
            norm(c, key + "post_self_attn_layernorm.", out);
        }
        if (c.postMlpLayernorm()) {
            norm(c, key + "post_mlp_layernorm.", out);
        }
        norm(c, key + "pre_mlp_layernorm.", out);
        boolean glu = c.activation().isGated();
        if (c.isMoeLayer(n)) {
            TransformerConfig.MoeSettings m = c.moe();
            out.add(new Tensor(key + "mlp.router.weight", (long) m.numExperts() * h, false));
            int local = m.numExperts() / layout.expertParallel();
            long ffn = m.ffnHiddenSize() / tp;
            long fc1 = glu ? 2 * ffn : ffn;
            for (int e = 0; e < local; e++) {
                String ek = key + "mlp.experts.local_experts." + e + ".";
                out.add(new Tensor(ek + "linear_fc1.weight", fc1 * h, true));
                out.add(new Tensor(ek + "linear_fc2.weight", h * ffn, true));
                if (c.addBiasLinear()) {
                    out.add(new Tensor(ek + "linear_fc1.bias", fc1, true));
                    out.add(new Tensor(ek + "linear_fc2.bias", h, true));
                }
            }
            long shared = m.config().sharedExpertFfnHiddenSize() / tp;
            if (shared > 0) {
                String sk = key + "mlp.shared_experts.";
                long sharedFc1 = glu ? 2 * shared : shared;
                out.add(new Tensor(sk + "linear_fc1.weight", sharedFc1 * h, false));
                out.add(new Tensor(sk + "linear_fc2.weight", h * shared, false));
                if (c.addBiasLinear()) {
                    out.add(new Tensor(sk + "linear_fc1.bias", sharedFc1, false));
                    out.add(new Tensor(sk + "linear_fc2.bias", h, false));
                }
            }
        } else {
            long ffn = c.ffnHiddenSize() / tp;
            long fc1 = glu ? 2 * ffn : ffn;
            out.add(new Tensor(key + "mlp.linear_fc1.weight", fc1 * h, false));
            if (c.addBiasLinear()) {
                out.add(new Tensor(key + "mlp.linear_fc1.bias", fc1, false));
            }
            out.add(new Tensor(key + "mlp.linear_fc2.weight", h * ffn, false));
            if (c.addBiasLinear()) {
                out.add(new Tensor(key + "mlp.linear_fc2.bias", h, false));
            }
        }
    }

    private static void norm(TransformerConfig c, String key, List<Tensor> out) {
        norm(c, key, c.hiddenSize(), out);
    }

    private static void norm(TransformerConfig c, String key, long width, List<Tensor> out) {
        out.add(new Tensor(key + "weight", width, false));
        if (c.normalization() == TransformerConfig.Normalization.LAYER_NORM) {
            out.add(new Tensor(key + "bias", width, false));
        }
    }

    /** The weights of a layer's FP8 linears: QKV, projection and the dense MLP's FC1 and FC2 (not experts'). */
    private static final java.util.regex.Pattern FP8_WEIGHT = java.util.regex.Pattern.compile(
            "decoder\\.layers\\.(\\d+)\\.(self_attention\\.linear_qkv|self_attention\\.linear_proj|mlp\\.linear_fc1|mlp\\.linear_fc2)\\.weight");

    /**
     * @param c the model (its {@link TransformerConfig#fp8()} decides which layers are in FP8)
     * @param t one of a rank's tensors
     * @return whether {@code t} is the weight of a linear whose GEMMs run in FP8
     */
    public static boolean fp8Weight(TransformerConfig c, Tensor t) {
        if (c.fp8() == null || t.expert()) {
            return false;
        }
        java.util.regex.Matcher m = FP8_WEIGHT.matcher(t.key());
        return m.matches() && c.fp8().fp8Layer(Integer.parseInt(m.group(1)), c.numLayers());
    }

    /**
     * @param tensors a rank's tensors
     * @param expert whether to count expert or dense tensors
     * @return their elements
     */
    public static long numel(List<Tensor> tensors, boolean expert) {
        long n = 0;
        for (Tensor t : tensors) {
            if (t.expert() == expert) {
                n += t.numel();
            }
        }
        return n;
    }
}
