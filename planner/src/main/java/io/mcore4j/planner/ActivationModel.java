package io.mcore4j.planner;

import io.mcore4j.models.TransformerConfig;
import io.mcore4j.models.transformer.RecomputeSegment;
import io.mcore4j.moe.MoeConfig;

import java.util.Set;

/**
 * Bytes a layer keeps for backward, per micro-batch, from what each module of the layer saves:
 * the norms their inputs, the column-parallel linears their (gathered) inputs, the core attention
 * the fused QKV output (its value view keeps the whole tensor alive), the rotated or copied
 * queries and keys and its output (the attention block runs in a frame, so the rotation's
 * intermediates are freed), the MLP its pre-activation and activation (SwiGLU: the fused
 * gate/up output, the sigmoid, the SiLU and the product, as the scripted SwiGLU's graph keeps them), the row-parallel linears their inputs,
 * dropout its masks; a mixture-of-experts layer, in place of the MLP's, its {@code T x k} dispatched rows at each
 * stage of the experts (see {@code moeLayer}); full recompute's checkpointed runs keep their inputs, selective recompute's
 * modules their inputs and output leaves; under context parallelism the fused ring also its merged output
 * (its output leaf's gradient is emptied once used), and its backward's working set can be the largest transient. Validated against native peaks on the CPU
 * ({@code MemoryModelCpuTest}).
 *
 * <p>Shapes are per rank: {@code T = (s / CP) x b} tokens, {@code heads/TP} query heads,
 * {@code groups/TP} key/value heads, {@code ffn/TP} MLP columns; what sits outside the
 * tensor-parallel region is split over TP only with sequence parallelism.
 */
final class ActivationModel {
    private final TransformerConfig c;
    private final int tp;
    private final int cp;
    private final int ep;
    private final boolean fusedAttention;
    private final boolean fusedRing;
    private final ContextParallelStages stages;
    private final int bytes;

    /**
     * @param c the model as built for the layout
     * @param tp TP size
     * @param cp CP size
     * @param fusedAttention whether the core attention runs on libtorch's fused kernels (else composed, with s x s
     *     scores); under CP as {@code AttentionBackend.fusedUnderContextParallel} decides: {@code p2p} as a ring,
     *     {@code a2a} whole-sequence, {@code a2a+p2p} as a ring of its second level, never {@code allgather}
     */
    ActivationModel(TransformerConfig c, int tp, int cp, boolean fusedAttention) {
        this(c, tp, cp, 1, fusedAttention);
    }

    /**
     * @param c the model as built for the layout
     * @param tp TP size
     * @param cp CP size
     * @param ep expert-parallel size (the local experts whose weights a grouped GEMM stacks)
     * @param fusedAttention as {@link #ActivationModel(TransformerConfig, int, int, boolean)}
     */
    ActivationModel(TransformerConfig c, int tp, int cp, int ep, boolean fusedAttention) {
        this.c = c;
        this.tp = tp;
        this.cp = cp;
        this.ep = ep;
        this.fusedAttention = fusedAttention;
        this.stages = ContextParallelStages.of(c, tp, cp);
        this.fusedRing = this.fusedAttention && stages.ring() > 1;
        this.bytes = c.dtype().getNumOfBytes();
    }

    /**
     * @param tokens tokens of one micro-batch on this rank, {@code (s/CP) x b}
     * @return bytes kept for backward by the tensors outside the tensor-parallel region of one layer
     *     (norm inputs), split over TP with sequence parallelism
     */
    private double replicatedTerms(double tokens) {
        double sp = c.sequenceParallel() ? tp : 1;
        double h = c.hiddenSize();
        double kept = 2 * tokens * h / sp * bytes;               // input_layernorm and pre_mlp_layernorm inputs
        if (c.normalization() == TransformerConfig.Normalization.RMS_NORM) {
            // libtorch's rms_norm keeps its normalised values before the weight (in the input's dtype) and,
            // for half-precision input, the float32 copy it computed them from
            kept += 2 * tokens * h / sp * (bytes == 4 ? 4 : 4 + bytes);
        }
        double p = c.hiddenDropout();
        if (p > 0) {
            kept += 2 * tokens * h / sp;                         // two boolean masks
        }
        return kept;
    }

    /**
     * @param microBatch samples per micro-batch
     * @param seqLength tokens per sample
     * @param layers the layers of one model chunk
     * @return bytes a chunk's layers keep for backward for one micro-batch: a run that full recompute
     *     checkpoints keeps its input ({@link RecomputeSegment}: every group under uniform, the first
     *     layers under block), any other layer what {@link #plainLayer} says
     */
    double perChunk(int microBatch, int seqLength, int layers) {
        double kept = 0;
        for (RecomputeSegment segment : RecomputeSegment.of(c, layers)) {
            // a checkpointed run keeps its input; the gradient of its output leaf goes from the next
            // run's recomputation to this one directly and is freed once used
            kept += segment.recomputed() ? layerInput(microBatch, seqLength) : plainLayer(microBatch, seqLength);
        }
        return kept;
    }

    /**
     * @param microBatch samples per micro-batch
     * @param seqLength tokens per sample
     * @return bytes of one layer's input (what a checkpointed layer keeps)
     */
    double layerInput(int microBatch, int seqLength) {
        double tokens = (double) seqLength / cp * microBatch;
        return tokens * c.hiddenSize() / (c.sequenceParallel() ? tp : 1) * bytes;
    }

    /**
     * @param microBatch samples per micro-batch
     * @param seqLength tokens per sample
     * @return bytes one layer that full recompute does not checkpoint keeps for backward for one
     *     micro-batch, less what selective recompute of its modules saves
     */
    double plainLayer(int microBatch, int seqLength) {
        double tokens = (double) seqLength / cp * microBatch;
        double h = c.hiddenSize();
        double n = (double) c.numAttentionHeads() / tp;
        double g = (double) c.numQueryGroups() / tp;
        double d = c.kvChannels();
        boolean coreAttn = c.recomputes(TransformerConfig.RecomputeModule.CORE_ATTN);
        // the planner sizes every layer of a model with experts as a mixture of experts (mlpWidth)
        boolean mlp = c.recomputes(c.moe() != null ? TransformerConfig.RecomputeModule.MOE : TransformerConfig.RecomputeModule.MLP);
        double kept = replicatedTerms(tokens);
        kept += 2 * tokens * h * bytes;                          // linear_qkv and linear_fc1 inputs (gathered)
        kept += tokens * (n + 2 * g) * d * bytes;                // the fused QKV output
        if (c.usesRope()) {
            kept += tokens * (n + g) * d * bytes;                // rotated queries and keys
        }
        if (g < n) {
            if (!c.usesRope()) {
                kept += tokens * n * d * bytes;                  // queries: a copy (a view only with one head per group)
            }
            if (!fusedRing) {                                    // the ring repeats them only inside each kernel call
                kept += 2 * tokens * n * d * bytes;              // keys and values repeated per query head
            }
        }
        if (stages.allToAll() > 1 && !coreAttn) {
            // a2a, a2a+p2p: the attention keeps the queries, keys and values the first all-to-all gathered (new
            // tensors; the keys and values repeated to a multiple of its size in groups) and its output before the
            // second one, beside what the layer keeps without them. Not fitted; checked on the CPU (in-JVM
            // ranks, CpuProbe): LLaMA-like (8 heads, 2 groups), CP4, s 256, micro-batch 8, fused, over the 4 ranks,
            // on 2026-11-27 with the ring's terms (ringKept, ringBackward): a2a+p2p 2 x 2 measured 178.0 MB,
            // estimated 172.9 (-3%); with 1 group 165.2 MB, 170.0 (+3%); a2a 176.4 MB, 175.0 (-1%); p2p 170.1 MB,
            // 162.4 (-4.5%). Before the ring's terms (11-24): a2a+p2p -8%, p2p -7%
            kept += tokens * (2 * n + 2 * g * stages.groupRepeat()) * d * bytes;
        }
        kept += tokens * n * d * bytes;                          // attention output = linear_proj input
        if (fusedRing && !coreAttn) {
            kept += ringKept(tokens, n, d);
        }
        if (fusedAttention) {
            kept += coreAttn ? 0 : tokens * n * 4;               // log-sum-exp per query, float32
        } else if (!coreAttn) {
            double keys = (double) seqLength;                    // each query attends over the whole sequence under CP
            // the recorded casts keep the raw scores and their float32 copy, softmax its float32 output,
            // and in half precision the cast back keeps the probabilities again (a same-dtype cast is none)
            double perScore = bytes == 4 ? 8 : 12;
            // under CP the exchanged keys and values die with the frame around the blocks (8088ecb)
            kept += microBatch * n * ((double) seqLength / cp) * keys * perScore;
            if (c.attentionDropout() > 0) {
                kept += microBatch * n * ((double) seqLength / cp) * keys * (1 + bytes); // mask, dropped probabilities
            }
        }
        // a recorded function's output is a leaf; the gradient libtorch accumulates in it is emptied once its
        // function's backward has used it (AutogradScope), so only the leaves count: the recomputed attention's is
        // linear_proj's input, counted above
        if (mlp) {
            kept += tokens * h * bytes;                          // the recomputed MLP's output leaf
        }
        if (tp > 1) {
            // the recorded functions keep their inputs and outputs: the row-parallel linears' partial sums
            // and their reductions (with sequence parallelism the reduce-scatter's shard and the all-gathers'
            // shards); a recomputed MLP keeps none of its own (half of them)
            double linears = mlp ? 1 : 2;
            kept += linears * tokens * h * bytes * (c.sequenceParallel() ? 1 + 2.0 / tp : 2);
        }
        if (!mlp && c.moe() != null) {
            kept += moeLayer(tokens);
        } else if (!mlp) {
            kept += mlpActivations(tokens, (double) mlpWidth() / tp);
        }
        return kept;
    }

    /**
     * @param rows rows through an MLP
     * @param width its columns on this rank
     * @return bytes its activation keeps: SwiGLU the fused [gate; up] output, the sigmoid, the SiLU and the product;
     *     otherwise the pre-activation and the activation
     */
    private double mlpActivations(double rows, double width) {
        return (c.activation().isGated() ? 5 : 2) * rows * width * bytes;
    }

    /**
     * Bytes live at once while a layer runs backward beyond what the layers kept: the gradients
     * flowing through it, and under full recompute the activations of the largest checkpointed run,
     * recomputed together (a uniform group's {@code recomputeNumLayers} layers, one layer under block);
     * under selective recompute those of the largest recomputed module, rerun one at a time.
     *
     * @param microBatch samples per micro-batch
     * @param seqLength tokens per sample
     * @param layers the layers of one model chunk
     * @return bytes
     */
    double backwardTransient(int microBatch, int seqLength, int layers) {
        double tokens = (double) seqLength / cp * microBatch;
        double f = (double) mlpWidth() / tp;
        double fc1 = c.activation().isGated() ? 2 * f : f;
        // with experts, the gradients flow through the T x k dispatched rows; those of the experts' widths through
        // all of them at once with the grouped GEMM, else through one expert's share at a time
        double rows = tokens;
        double expertRows = tokens;
        if (c.moe() != null) {
            MoeConfig m = c.moe().config();
            rows = tokens * m.topK();
            expertRows = m.groupedGemm() ? rows : rows / Math.max(1.0, (double) m.numExperts() / ep);
        }
        double grads = (expertRows * 2 * fc1 + rows * 2 * c.hiddenSize()) * bytes;
        int rerun = 0;
        for (RecomputeSegment segment : RecomputeSegment.of(c, layers)) {
            rerun = segment.recomputed() ? Math.max(rerun, segment.size()) : rerun;
        }
        if (fusedRing && !c.recomputes(TransformerConfig.RecomputeModule.CORE_ATTN)) {
            grads = Math.max(grads, ringBackward(tokens));
        }
        TransformerConfig plain = c.toBuilder().recompute(TransformerConfig.Recompute.NONE).build();
        double plainLayer = new ActivationModel(plain, tp, cp, ep, fusedAttention).plainLayer(microBatch, seqLength);
        if (rerun > 0) {
            return grads + rerun * plainLayer;
        }
        // selective recompute reruns one module at a time: what it keeps without recompute is live again
        double module = 0;
        for (TransformerConfig.RecomputeModule m : c.recomputeModules()) {
            TransformerConfig only = c.toBuilder().recomputeSelective(Set.of(m)).build();
            module = Math.max(module, plainLayer - new ActivationModel(only, tp, cp, ep, fusedAttention).plainLayer(microBatch, seqLength));
        }
        return grads + module;
    }

    /**
     * What the fused ring ({@code FusedRingAttention}: {@code p2p}, and {@code a2a+p2p}'s second level) keeps
     * beyond the fused attention's output and log-sum-exp, per layer and micro-batch: its merged output is a new
     * heads-first tensor that the function saves, so the attention's output in {@code [s, b, h]} order (the
     * input {@code linear_proj} saves) is a copy of it, where libtorch's fused kernel writes its output
     * sequence-first and the reshape is a view (the ring is a recorded function, whose output leaf's gradient
     * is emptied once used). Under {@code a2a+p2p} the ring attends {@code A} times the tokens with {@code 1/A}
     * of the heads: the same bytes.
     *
     * @param tokens tokens of one micro-batch on this rank
     * @param n query heads on this rank
     * @param d head dimension
     * @return bytes
     */
    private double ringKept(double tokens, double n, double d) {
        return tokens * n * d * bytes;
    }

    /**
     * Bytes live at once while the fused ring's backward runs, beyond what the layers keep: the gradient
     * flowing past the attention into the residual, and the ring's working set at a step, from what its
     * backward allocates: one kernel call's query, key and value gradients and the running query gradient
     * (float32), the key/value gradient block travelling around the ring (float32: the one that arrived and the
     * one sent on), and the key/value block in hand with the next one arriving (the activations' dtype). Queries
     * and keys/values count per rank as the ring sees them ({@code a2a+p2p}: {@code A} times the tokens with
     * {@code 1/A} of the heads, the same elements; the key/value groups repeated to a multiple of {@code A}).
     *
     * @param tokens tokens of one micro-batch on this rank
     * @return bytes
     */
    private double ringBackward(double tokens) {
        double d = c.kvChannels();
        double q = tokens * c.numAttentionHeads() / tp * d;
        double kv = tokens * ((double) c.numQueryGroups() / tp) * stages.groupRepeat() * d;
        double float32 = (q + 2 * kv) + q + 2 * (2 * kv);
        return tokens * c.hiddenSize() * bytes + float32 * 4 + 2 * (2 * kv) * bytes;
    }

    /**
     * Bytes of the output layer and the loss on the last stage for one micro-batch at their peak:
     * the logits, and the vocabulary-parallel cross-entropy's two float32 copies of them.
     *
     * @param microBatch samples per micro-batch
     * @param seqLength tokens per sample
     * @return bytes
     */
    double logits(int microBatch, int seqLength) {
        double tokens = (double) seqLength / cp * microBatch;
        double v = (double) c.vocabSize() / tp;
        return tokens * v * (bytes + 8) + 2 * tokens * c.hiddenSize() * bytes;
    }

    /**
     * @param microBatch samples per micro-batch
     * @param seqLength tokens per sample
     * @return bytes the stage keeps per micro-batch outside its layers: the input hidden states and token ids
     */
    double stageInput(int microBatch, int seqLength) {
        double tokens = (double) seqLength / cp * microBatch;
        double sp = c.sequenceParallel() ? tp : 1;
        return tokens * c.hiddenSize() / sp * bytes + 2 * tokens * 8;
    }

    /**
     * @param microBatch samples per micro-batch
     * @param seqLength tokens per sample
     * @return bytes the first stage's vocabulary-parallel embedding keeps beyond its output at TP > 1:
     *     its recorded reduction's partial lookup
     */
    double embedding(int microBatch, int seqLength) {
        if (tp == 1) {
            return 0;
        }
        double tokens = (double) seqLength / cp * microBatch;
        return tokens * c.hiddenSize() * bytes;
    }

    /**
     * What a mixture-of-experts layer keeps beyond the norm's output (counted with the dense terms), per
     * {@code docs/moe.md}: each of the {@code T x k} dispatched rows (dropless; padded to capacity where asked) as the
     * experts' input, fc1's output and the activation's (SwiGLU: as the dense MLP's five), the combined rows the
     * weighted sum reads and, when the rows cross ranks (EP or expert-TP above 1), the experts' output that the
     * exchange back keeps; with the grouped GEMM one stacked copy of the local experts' weights
     * (kept by the grouped product); the shared expert as a dense MLP of its width; the router's scores and map.
     * Rows, expert widths and the shared expert's columns are per expert-TP (= TP) rank.
     */
    private double moeLayer(double tokens) {
        MoeConfig m = c.moe().config();
        double h = c.hiddenSize();
        double rows = tokens * m.topK();
        if (m.padToCapacity() && m.capacityFactor() > 1) {
            rows *= m.capacityFactor();
        }
        double f = (double) m.ffnHiddenSize() / tp;
        // the experts' input and the combined rows the weighted sum keeps; across ranks the exchange back's input too
        double rowTensors = ep > 1 || tp > 1 ? 3 : 2;
        double kept = rows * rowTensors * h * bytes + mlpActivations(rows, f);
        if (m.groupedGemm()) {
            kept += (double) m.numExperts() / ep * (m.activation().fc1Factor() + 1) * f * h * bytes;
        }
        if (m.sharedExpertFfnHiddenSize() > 0) {
            kept += mlpActivations(tokens, (double) m.sharedExpertFfnHiddenSize() / tp);
        }
        kept += tokens * m.numExperts() * 16;                     // router scores, probabilities, maps (float32)
        return kept;
    }

    private int mlpWidth() {
        return c.moe() != null ? c.moe().ffnHiddenSize() : c.ffnHiddenSize();
    }
}
