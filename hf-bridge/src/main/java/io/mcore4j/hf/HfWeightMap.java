package io.mcore4j.hf;

import io.mcore4j.core.shard.ShardedTensor;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.models.gpt.MultiTokenPrediction;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The correspondence between mcore4j's global tensors and a Hugging Face checkpoint's tensors, for
 * one architecture and config. Every mcore4j tensor ({@link Plan}) is a stack, along its dim 0, of
 * {@link Segment}s: row ranges of Hugging Face tensors (read as stored, or transposed for GPT-2's
 * Conv1D weights), or zero rows (vocabulary padding).
 *
 * <p>Layouts that differ from Hugging Face's:
 * <ul>
 * <li>The fused QKV weight (and bias) is grouped: for each query group, its
 *     {@code heads/groups} query heads, then its key head, then its value head. Hugging Face's
 *     separate q/k/v projections are head-major, so the rows are interleaved group by group.
 *     RoPE needs no permutation: both rotate the two halves of each head ({@code rotate_half}).
 * <li>SwiGLU's fused fc1 is {@code [gate; up]} (the tensor-parallel layer cuts it with stride 2).
 * <li>Qwen3's and Gemma 3's per-head {@code q_norm}/{@code k_norm} are mcore4j's {@code q_layernorm}/{@code k_layernorm}
 *     (one weight of head_dim, shared by every head and replicated over tensor-parallel ranks).
 * <li>Gemma 3's {@code post_attention_layernorm} is mcore4j's {@code post_self_attn_layernorm} (LLaMA's of that name
 *     is the {@code pre_mlp_layernorm}), its {@code pre_feedforward_layernorm} and {@code post_feedforward_layernorm}
 *     the {@code pre_mlp_layernorm} and {@code post_mlp_layernorm}; the zero-centred weights are stored as they are.
 * <li>DeepSeek-V3's attention is mcore4j's multi-latent attention tensor for tensor ({@link #multiLatentAttention});
 *     its {@code e_score_correction_bias} is the router's {@code expert_bias}, its shared experts' gate and up
 *     projections the shared expert's fused fc1.
 * <li>The vocabulary is padded to the model's size: padded embedding/output rows are zero on import
 *     and dropped on export.
 * </ul>
 */
final class HfWeightMap {
    /** A Hugging Face tensor the mapping needs, with the shape the config implies. */
    record HfTensor(String name, long[] shape) {
        @Override
        public String toString() {
            return name + Arrays.toString(shape);
        }
    }

    /**
     * Rows {@code [start, start + length)} of an mcore4j global tensor come from rows
     * {@code [hfStart, hfStart + length)} of {@code hfName} (its columns are the mcore4j columns);
     * when {@code transposed}, from its columns {@code [hfStart, hfStart + length)} (its rows are
     * the mcore4j columns). A null name is zero rows.
     */
    record Segment(long start, long length, String hfName, long hfStart, boolean transposed) {}

    /** One mcore4j global tensor: key, global shape, and its segments in row order, covering every row. */
    record Plan(String key, long[] shape, List<Segment> segments) {
        long columns() {
            return shape.length == 1 ? 1 : shape[1];
        }
    }

    private final Map<String, Plan> plans = new LinkedHashMap<>();
    private final Map<String, HfTensor> tensors = new LinkedHashMap<>();

    private HfWeightMap() {}

    /** @return the mcore4j tensors by key */
    Map<String, Plan> plans() {
        return Collections.unmodifiableMap(plans);
    }

    /** @return the Hugging Face tensors by name, in checkpoint order */
    Map<String, HfTensor> tensors() {
        return Collections.unmodifiableMap(tensors);
    }

    /**
     * Builds the mapping.
     *
     * @param arch the architecture
     * @param model the mcore4j config (its vocabulary possibly padded)
     * @param hfVocab the checkpoint's vocabulary size
     * @param gpt2Prefix GPT-2's tensor name prefix ({@code "transformer."} or empty); unused otherwise
     * @return the mapping
     */
    static HfWeightMap of(HfArchitecture arch, TransformerConfig model, int hfVocab, String gpt2Prefix) {
        if (model.vocabSize() < hfVocab) {
            throw new HfCheckpointException("the model's vocabulary of " + model.vocabSize()
                    + " is smaller than the checkpoint's " + hfVocab);
        }
        HfWeightMap m = new HfWeightMap();
        if (arch.isLlamaFamily()) {
            m.llama(arch, model, hfVocab);
        } else {
            m.gpt2(model, hfVocab, gpt2Prefix);
        }
        return m;
    }

    /**
     * The config with the multi-token prediction depths that model tensors name ({@code mtp.layers.<k>.*}): a
     * checkpoint's {@code config.json} does not say whether the run built them ({@code --mtp-num-layers}), the
     * model does.
     *
     * @param c the config read from {@code config.json}
     * @param pieces the model's tensors (every chunk of this rank)
     * @return {@code c}, with {@link TransformerConfig#mtp()} of as many depths as the tensors name (none: as it was)
     */
    static TransformerConfig withDepthsOf(TransformerConfig c, List<ShardedTensor> pieces) {
        int depths = 0;
        for (ShardedTensor t : pieces) {
            if (t.key().startsWith(MultiTokenPrediction.KEY)) {
                String rest = t.key().substring(MultiTokenPrediction.KEY.length());
                depths = Math.max(depths, Integer.parseInt(rest.substring(0, rest.indexOf('.'))) + 1);
            }
        }
        if (depths == 0 || c.mtp() != null && c.mtp().numLayers() == depths) {
            return c;
        }
        return c.toBuilder().mtp(new TransformerConfig.MtpSettings(depths, c.mtp() == null
                ? TransformerConfig.MtpSettings.DEFAULT_LOSS_SCALING_FACTOR : c.mtp().lossScalingFactor())).build();
    }

    private void llama(HfArchitecture arch, TransformerConfig c, int hfVocab) {
        long h = c.hiddenSize();
        boolean gemma = arch == HfArchitecture.GEMMA3;
        boolean qkNorms = arch.hasQkNorm();
        if (qkNorms != c.qkLayernorm()) {
            throw new HfCheckpointException(arch.className() + (qkNorms ? " has query and key norms: build the model with"
                    + " qk_layernorm" : " has no query and key norms"));
        }
        if (gemma != (c.postSelfAttnLayernorm() && c.postMlpLayernorm()) || c.postSelfAttnLayernorm() != c.postMlpLayernorm()) {
            throw new HfCheckpointException(arch.className() + (gemma ? " has norms after the attention and the MLP: build"
                    + " the model with post_self_attn_layernorm and post_mlp_layernorm" : " has no norms after the attention"
                    + " and the MLP"));
        }
        vocab("embedding.word_embeddings.weight", "model.embed_tokens.weight", c.vocabSize(), hfVocab, h);
        for (int i = 0; i < c.numLayers(); i++) {
            layer(arch, c, "model.layers." + i + ".", "decoder.layers." + i + ".", i);
        }
        if (c.mtp() != null) {
            multiTokenPrediction(arch, c);
        }
        same("decoder.final_layernorm.weight", "model.norm.weight", h);
        if (!c.tiedEmbeddings()) {
            vocab("output_layer.weight", "lm_head.weight", c.vocabSize(), hfVocab, h);
        }
    }

    /**
     * One decoder layer's tensors: Hugging Face's under {@code hf} ({@code "model.layers.N."}), mcore4j's under
     * {@code mc}, the layer built like decoder layer {@code kind} (dense or MoE).
     */
    private void layer(HfArchitecture arch, TransformerConfig c, String hf, String mc, int kind) {
        long h = c.hiddenSize();
        long d = c.kvChannels();
        long heads = c.numAttentionHeads();
        long groups = c.numQueryGroups();
        long ffn = c.ffnHiddenSize();
        boolean bias = c.addBiasLinear();
        boolean qkvBias = bias || c.addQkvBias();
        boolean gemma = arch == HfArchitecture.GEMMA3;
        boolean qkNorms = arch.hasQkNorm();
        same(mc + "input_layernorm.weight", hf + "input_layernorm.weight", h);
        if (c.multiLatentAttention() != null) {
            multiLatentAttention(c, hf + "self_attn.", mc + "self_attention.");
        } else {
            String q = hf + "self_attn.q_proj.";
            String k = hf + "self_attn.k_proj.";
            String v = hf + "self_attn.v_proj.";
            groupedQkv(mc + "self_attention.linear_qkv.weight", q + "weight", k + "weight", v + "weight", heads, groups,
                    d, h);
            if (qkvBias) {
                groupedQkv(mc + "self_attention.linear_qkv.bias", q + "bias", k + "bias", v + "bias", heads, groups, d, 0);
            }
            if (qkNorms) {
                same(mc + "self_attention.q_layernorm.weight", hf + "self_attn.q_norm.weight", d);
                same(mc + "self_attention.k_layernorm.weight", hf + "self_attn.k_norm.weight", d);
            }
            same(mc + "self_attention.linear_proj.weight", hf + "self_attn.o_proj.weight", h, heads * d);
            if (bias) {
                same(mc + "self_attention.linear_proj.bias", hf + "self_attn.o_proj.bias", h);
            }
        }
        if (gemma) {
            // Gemma's post_attention_layernorm follows the attention; its pre_feedforward_layernorm is LLaMA's
            same(mc + "post_self_attn_layernorm.weight", hf + "post_attention_layernorm.weight", h);
            same(mc + "pre_mlp_layernorm.weight", hf + "pre_feedforward_layernorm.weight", h);
            same(mc + "post_mlp_layernorm.weight", hf + "post_feedforward_layernorm.weight", h);
        } else {
            same(mc + "pre_mlp_layernorm.weight", hf + "post_attention_layernorm.weight", h);
        }
        if (c.isMoeLayer(kind)) {
            experts(arch, c, hf, mc);
        } else {
            String mlp = hf + "mlp.";
            stacked(mc + "mlp.linear_fc1.weight", h, mlp + "gate_proj.weight", mlp + "up_proj.weight", ffn);
            if (bias) {
                stacked(mc + "mlp.linear_fc1.bias", 0, mlp + "gate_proj.bias", mlp + "up_proj.bias", ffn);
            }
            same(mc + "mlp.linear_fc2.weight", mlp + "down_proj.weight", h, ffn);
            if (bias) {
                same(mc + "mlp.linear_fc2.bias", mlp + "down_proj.bias", h);
            }
        }
    }

    /**
     * DeepSeek-V3's multi-token prediction layers, which its checkpoints store after the decoder's
     * ({@code model.layers.<num_hidden_layers + k>.}, {@code num_nextn_predict_layers} of them), as mcore4j's depths
     * ({@code mtp.layers.<k>.}): {@code enorm}, {@code hnorm}, {@code eh_proj} by the same names,
     * {@code shared_head.norm} the depth's {@code final_layernorm}, the layer's attention, norms and MLP the depth's
     * {@code transformer_layer} (built like the decoder's last layer). The layer's {@code embed_tokens} and
     * {@code shared_head.head}, copies of the model's embedding and output layer, are neither read nor written.
     */
    private void multiTokenPrediction(HfArchitecture arch, TransformerConfig c) {
        if (arch != HfArchitecture.DEEPSEEK_V3) {
            throw new HfCheckpointException(arch.className() + " has no multi-token prediction layers: build the model"
                    + " without --mtp-num-layers");
        }
        long h = c.hiddenSize();
        for (int k = 0; k < c.mtp().numLayers(); k++) {
            String hf = "model.layers." + (c.numLayers() + k) + ".";
            String mc = "mtp.layers." + k + ".";
            same(mc + "enorm.weight", hf + "enorm.weight", h);
            same(mc + "hnorm.weight", hf + "hnorm.weight", h);
            same(mc + "eh_proj.weight", hf + "eh_proj.weight", h, 2 * h);
            layer(arch, c, hf, mc + "transformer_layer.", c.numLayers() - 1);
            same(mc + "final_layernorm.weight", hf + "shared_head.norm.weight", h);
        }
    }

    /**
     * DeepSeek-V3's attention ({@code self_attn.*}) as mcore4j's multi-latent attention, tensor for tensor:
     * {@code q_a_proj}, {@code q_a_layernorm} and {@code q_b_proj} (or {@code q_proj}) are {@code linear_q_down_proj},
     * {@code q_layernorm} and {@code linear_q_up_proj} (or {@code linear_q_proj}); {@code kv_a_proj_with_mqa},
     * {@code kv_a_layernorm} and {@code kv_b_proj} are {@code linear_kv_down_proj}, {@code kv_layernorm} and
     * {@code linear_kv_up_proj}; {@code o_proj} is {@code linear_proj}. Both lay the heads out head-major, each head's
     * channels not rotated first; the rotated ones stay interleaved, as the attention reads them.
     */
    private void multiLatentAttention(TransformerConfig c, String hf, String mc) {
        TransformerConfig.MlaDims dims = c.multiLatentAttention();
        long h = c.hiddenSize();
        long heads = c.numAttentionHeads();
        if (dims.compressesQueries()) {
            same(mc + "linear_q_down_proj.weight", hf + "q_a_proj.weight", dims.qLoraRank(), h);
            same(mc + "q_layernorm.weight", hf + "q_a_layernorm.weight", dims.qLoraRank());
            same(mc + "linear_q_up_proj.weight", hf + "q_b_proj.weight", heads * dims.queryKeyWidth(), dims.qLoraRank());
        } else {
            same(mc + "linear_q_proj.weight", hf + "q_proj.weight", heads * dims.queryKeyWidth(), h);
        }
        same(mc + "linear_kv_down_proj.weight", hf + "kv_a_proj_with_mqa.weight",
                dims.kvLoraRank() + dims.qkPosEmbHeadDim(), h);
        same(mc + "kv_layernorm.weight", hf + "kv_a_layernorm.weight", dims.kvLoraRank());
        same(mc + "linear_kv_up_proj.weight", hf + "kv_b_proj.weight", heads * (dims.qkHeadDim() + dims.vHeadDim()),
                dims.kvLoraRank());
        same(mc + "linear_proj.weight", hf + "o_proj.weight", h, heads * dims.vHeadDim());
    }

    /**
     * A mixture-of-experts layer's router and experts: Mixtral's {@code block_sparse_moe.gate} and experts' {@code w1}
     * (gate), {@code w3} (up), {@code w2} (down); Qwen3-MoE's and DeepSeek-V3's {@code mlp.gate} and experts'
     * {@code gate_proj}, {@code up_proj}, {@code down_proj}; DeepSeek-V3's {@code mlp.gate.e_score_correction_bias}
     * (the router's {@code expert_bias}) and {@code mlp.shared_experts.*} (the {@code shared_experts}).
     */
    private void experts(HfArchitecture arch, TransformerConfig c, String hf, String mc) {
        boolean mixtral = arch == HfArchitecture.MIXTRAL;
        if (!mixtral && arch != HfArchitecture.QWEN3_MOE && arch != HfArchitecture.DEEPSEEK_V3) {
            throw new HfCheckpointException(arch.className() + " has no mixture-of-experts layers");
        }
        long h = c.hiddenSize();
        long experts = c.moe().numExperts();
        long expertFfn = c.moe().ffnHiddenSize();
        String moe = hf + (mixtral ? "block_sparse_moe." : "mlp.");
        same(mc + "mlp.router.weight", moe + "gate.weight", experts, h);
        for (int e = 0; e < experts; e++) {
            String ex = moe + "experts." + e + ".";
            String mx = mc + "mlp.experts.local_experts." + e + ".";
            stacked(mx + "linear_fc1.weight", h, ex + (mixtral ? "w1" : "gate_proj") + ".weight",
                    ex + (mixtral ? "w3" : "up_proj") + ".weight", expertFfn);
            same(mx + "linear_fc2.weight", ex + (mixtral ? "w2" : "down_proj") + ".weight", h, expertFfn);
        }
        if (c.moe().config().auxLossFree()) {
            same(mc + "mlp.router.expert_bias", moe + "gate.e_score_correction_bias", experts);
        }
        long sharedFfn = c.moe().config().sharedExpertFfnHiddenSize();
        if (sharedFfn > 0) {
            String shared = moe + "shared_experts.";
            stacked(mc + "mlp.shared_experts.linear_fc1.weight", h, shared + "gate_proj.weight", shared + "up_proj.weight",
                    sharedFfn);
            same(mc + "mlp.shared_experts.linear_fc2.weight", shared + "down_proj.weight", h, sharedFfn);
        }
    }

    /**
     * The LoRA adapters of a LLaMA-family model as PEFT stores them
     * ({@code base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight}, ...). A fused linear's
     * adapter splits exactly: its {@code A} ({@code linear_in}) is shared, so each of the Hugging Face
     * modules it fuses (q/k/v, gate/up) gets a copy of it, and its {@code B} ({@code linear_out}) is cut
     * by rows as the base weight is (grouped QKV, stacked gate and up):
     * {@code ΔW_q = (alpha/r)·B_q·A}. An mcore4j row range can therefore feed several PEFT tensors.
     *
     * @param arch the architecture, of the LLaMA family
     * @param c the model's config
     * @param rank the adapters' rank
     * @param targets Megatron module names that have adapters
     * @return the mapping, its tensors in layer order
     * @throws HfCheckpointException for GPT-2 or a mixture-of-experts model
     */
    static HfWeightMap adapters(HfArchitecture arch, TransformerConfig c, long rank, java.util.Set<String> targets) {
        if (!arch.isLlamaFamily() || c.moe() != null) {
            throw new HfCheckpointException("PEFT adapter export covers the dense LLaMA-family architectures; "
                    + arch.className() + (c.moe() != null ? " with experts" : "") + " is not one");
        }
        HfWeightMap m = new HfWeightMap();
        long h = c.hiddenSize();
        long d = c.kvChannels();
        long heads = c.numAttentionHeads();
        long groups = c.numQueryGroups();
        long ffn = c.ffnHiddenSize();
        String a = "lora_A.weight";
        String b = "lora_B.weight";
        for (int i = 0; i < c.numLayers(); i++) {
            String hf = "base_model.model.model.layers." + i + ".";
            String mc = "decoder.layers." + i + ".";
            String in = ".adapter.linear_in.weight";
            String out = ".adapter.linear_out.weight";
            if (targets.contains("linear_qkv")) {
                String[] qkv = {hf + "self_attn.q_proj.", hf + "self_attn.k_proj.", hf + "self_attn.v_proj."};
                m.shared(mc + "self_attention.linear_qkv" + in, rank, h, qkv[0] + a, qkv[1] + a, qkv[2] + a);
                m.groupedQkv(mc + "self_attention.linear_qkv" + out, qkv[0] + b, qkv[1] + b, qkv[2] + b, heads, groups,
                        d, rank);
            }
            if (targets.contains("linear_proj")) {
                m.same(mc + "self_attention.linear_proj" + in, hf + "self_attn.o_proj." + a, rank, heads * d);
                m.same(mc + "self_attention.linear_proj" + out, hf + "self_attn.o_proj." + b, h, rank);
            }
            if (targets.contains("linear_fc1")) {
                String gate = hf + "mlp.gate_proj.";
                String up = hf + "mlp.up_proj.";
                m.shared(mc + "mlp.linear_fc1" + in, rank, h, gate + a, up + a);
                m.stacked(mc + "mlp.linear_fc1" + out, rank, gate + b, up + b, ffn);
            }
            if (targets.contains("linear_fc2")) {
                m.same(mc + "mlp.linear_fc2" + in, hf + "mlp.down_proj." + a, rank, ffn);
                m.same(mc + "mlp.linear_fc2" + out, hf + "mlp.down_proj." + b, h, rank);
            }
        }
        return m;
    }

    /** An mcore4j tensor [rows, columns] written whole to each of several Hugging Face tensors (a shared LoRA A). */
    private void shared(String key, long rows, long columns, String... hfNames) {
        List<Segment> s = new ArrayList<>();
        for (String name : hfNames) {
            need(name, rows, columns);
            s.add(new Segment(0, rows, name, 0, false));
        }
        plan(key, new long[] {rows, columns}, s);
    }

    private void gpt2(TransformerConfig c, int hfVocab, String p) {
        long h = c.hiddenSize();
        long d = c.kvChannels();
        long heads = c.numAttentionHeads();
        long ffn = c.ffnHiddenSize();
        if (c.numQueryGroups() != heads || d * heads != h) {
            throw new HfCheckpointException("GPT-2 has multi-head attention with h / heads channels per head; got "
                    + c.numQueryGroups() + " groups and " + d + " channels for " + heads + " heads of width " + h);
        }
        vocab("embedding.word_embeddings.weight", p + "wte.weight", c.vocabSize(), hfVocab, h);
        same("embedding.position_embeddings.weight", p + "wpe.weight", c.maxSequenceLength(), h);
        for (int i = 0; i < c.numLayers(); i++) {
            String hf = p + "h." + i + ".";
            String mc = "decoder.layers." + i + ".";
            same(mc + "input_layernorm.weight", hf + "ln_1.weight", h);
            same(mc + "input_layernorm.bias", hf + "ln_1.bias", h);
            // c_attn is [h, 3h] with output columns [q | k | v], each head-major; mcore4j groups them per head
            String attn = hf + "attn.c_attn.";
            need(attn + "weight", h, 3 * h);
            need(attn + "bias", 3 * h);
            List<Segment> w = new ArrayList<>();
            List<Segment> b = new ArrayList<>();
            for (long g = 0; g < heads; g++) {
                for (long part = 0; part < 3; part++) {
                    long start = (g * 3 + part) * d;
                    w.add(new Segment(start, d, attn + "weight", part * h + g * d, true));
                    b.add(new Segment(start, d, attn + "bias", part * h + g * d, false));
                }
            }
            plan(mc + "self_attention.linear_qkv.weight", new long[] {3 * h, h}, w);
            plan(mc + "self_attention.linear_qkv.bias", new long[] {3 * h}, b);
            transposed(mc + "self_attention.linear_proj.weight", hf + "attn.c_proj.weight", h, h);
            same(mc + "self_attention.linear_proj.bias", hf + "attn.c_proj.bias", h);
            same(mc + "pre_mlp_layernorm.weight", hf + "ln_2.weight", h);
            same(mc + "pre_mlp_layernorm.bias", hf + "ln_2.bias", h);
            transposed(mc + "mlp.linear_fc1.weight", hf + "mlp.c_fc.weight", ffn, h);
            same(mc + "mlp.linear_fc1.bias", hf + "mlp.c_fc.bias", ffn);
            transposed(mc + "mlp.linear_fc2.weight", hf + "mlp.c_proj.weight", h, ffn);
            same(mc + "mlp.linear_fc2.bias", hf + "mlp.c_proj.bias", h);
        }
        same("decoder.final_layernorm.weight", p + "ln_f.weight", h);
        same("decoder.final_layernorm.bias", p + "ln_f.bias", h);
    }

    /** An mcore4j tensor equal to a Hugging Face one. */
    private void same(String key, String hfName, long... shape) {
        need(hfName, shape);
        plan(key, shape, List.of(new Segment(0, shape[0], hfName, 0, false)));
    }

    /** An mcore4j weight [rows, columns] that is the transpose of a Hugging Face Conv1D weight [columns, rows]. */
    private void transposed(String key, String hfName, long rows, long columns) {
        need(hfName, columns, rows);
        plan(key, new long[] {rows, columns}, List.of(new Segment(0, rows, hfName, 0, true)));
    }

    /** [first; second], each {@code rows} long (fused SwiGLU fc1); {@code columns == 0} for 1-D biases. */
    private void stacked(String key, long columns, String first, String second, long rows) {
        long[] part = columns == 0 ? new long[] {rows} : new long[] {rows, columns};
        need(first, part);
        need(second, part);
        long[] shape = part.clone();
        shape[0] = 2 * rows;
        plan(key, shape, List.of(new Segment(0, rows, first, 0, false), new Segment(rows, rows, second, 0, false)));
    }

    /** The embedding or output layer: the checkpoint's rows, then zero rows up to the padded size. */
    private void vocab(String key, String hfName, long padded, long hfVocab, long h) {
        need(hfName, hfVocab, h);
        List<Segment> s = new ArrayList<>();
        s.add(new Segment(0, hfVocab, hfName, 0, false));
        if (padded > hfVocab) {
            s.add(new Segment(hfVocab, padded - hfVocab, null, 0, false));
        }
        plan(key, new long[] {padded, h}, s);
    }

    /** Grouped QKV rows from head-major q [heads*d], k and v [groups*d]; {@code columns == 0} for biases. */
    private void groupedQkv(String key, String q, String k, String v, long heads, long groups, long d, long columns) {
        long perGroup = heads / groups;
        need(q, columns == 0 ? new long[] {heads * d} : new long[] {heads * d, columns});
        need(k, columns == 0 ? new long[] {groups * d} : new long[] {groups * d, columns});
        need(v, columns == 0 ? new long[] {groups * d} : new long[] {groups * d, columns});
        List<Segment> s = new ArrayList<>();
        long row = 0;
        for (long g = 0; g < groups; g++) {
            s.add(new Segment(row, perGroup * d, q, g * perGroup * d, false));
            row += perGroup * d;
            s.add(new Segment(row, d, k, g * d, false));
            row += d;
            s.add(new Segment(row, d, v, g * d, false));
            row += d;
        }
        plan(key, columns == 0 ? new long[] {row} : new long[] {row, columns}, s);
    }

    private void need(String hfName, long... shape) {
        tensors.put(hfName, new HfTensor(hfName, shape.clone()));
    }

    private void plan(String key, long[] shape, List<Segment> segments) {
        plans.put(key, new Plan(key, shape, List.copyOf(segments)));
    }
}
