#!/usr/bin/env python3
"""Makes the tiny Hugging Face fixtures of hf-bridge's tests: one random model per architecture the
bridge imports, built by transformers from a config (nothing downloaded) with a fixed seed, every
parameter (norm weights and biases included) drawn at random so that a wrong mapping shows in the
logits. Each fixture directory holds config.json, the safetensors file(s) and logits.json: the
float32 logits transformers computes for a fixed prompt after loading the saved files back, and the 20
tokens its greedy generate() appends to that prompt (no end-of-sequence stop).

Run from the repository root:  /work/venv-hf/bin/python scripts/hf/make_fixtures.py [NAME ...]
(pip install torch transformers safetensors; Qwen3 needs transformers >= 4.51, Gemma 3 and Qwen3-MoE transformers 5). Output:
hf-bridge/src/test/resources/hf/<name>/, for every fixture or only those named.
"""
import json
import os
import shutil
import sys

import torch
import transformers
from transformers import (Gemma3ForCausalLM, Gemma3TextConfig, GPT2Config, GPT2LMHeadModel, LlamaConfig,
                          LlamaForCausalLM, MistralConfig, MistralForCausalLM, MixtralConfig, MixtralForCausalLM,
                          Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM, Qwen3MoeConfig,
                          Qwen3MoeForCausalLM, DeepseekV3Config, DeepseekV3ForCausalLM)

OUT = os.path.join("hf-bridge", "src", "test", "resources", "hf")
PROMPT = [3, 17, 42, 99, 0, 8, 64, 23]
GENERATED = 20
VOCAB = 100
SMALL = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-5)


def fixtures():
    """(name, model class, config, save dtype, max shard size or None)."""
    return [
        ("llama", LlamaForCausalLM, LlamaConfig(**SMALL, tie_word_embeddings=False, rope_parameters={
            "rope_type": "llama3", "rope_theta": 20000.0, "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 128}), torch.bfloat16, None),
        ("qwen2", Qwen2ForCausalLM, Qwen2Config(**SMALL, tie_word_embeddings=True), torch.float16, None),
        # a sliding window of 4 tokens: shorter than the prompt (8) and the 28 positions of the greedy generation
        ("mistral", MistralForCausalLM, MistralConfig(**SMALL, tie_word_embeddings=False, sliding_window=4),
         torch.float32, "40KB"),
        ("mixtral", MixtralForCausalLM, MixtralConfig(**dict(SMALL, intermediate_size=32), num_local_experts=4,
                                                       num_experts_per_tok=2, tie_word_embeddings=False),
         torch.bfloat16, None),
        ("gpt2", GPT2LMHeadModel, GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64),
         torch.float32, None),
        # QK-norm, a head dimension (16) that is not hidden / heads (8), GQA, untied head, Qwen3's rope_theta
        ("qwen3", Qwen3ForCausalLM, Qwen3Config(**SMALL, head_dim=16, tie_word_embeddings=False,
                                                 rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
         torch.bfloat16, None),
        # Qwen2's use_sliding_window from max_window_layers on: layer 0 global, layer 1 windowed (5 tokens)
        ("qwen2_window", Qwen2ForCausalLM, Qwen2Config(**SMALL, tie_word_embeddings=False, use_sliding_window=True,
                                                        sliding_window=5, max_window_layers=1), torch.float32, None),
        # Gemma 3 text: layers 0, 1, 3 with a 4-token window and the local rope base, layer 2 global (Megatron's
        # window_attn_skip_freq 3) with linear rope scaling (Gemma 3 4B and larger: factor 8; 2 here, where 8
        # makes the greedy tokens repeat one id); zero-centred pre and post norms, QK-norm, GeGLU, embeddings
        # scaled by sqrt(32), query_pre_attn_scalar 24 for a head of 16, tied head
        ("gemma3", Gemma3ForCausalLM, Gemma3TextConfig(
            **dict(SMALL, num_hidden_layers=4, rms_norm_eps=1e-6), head_dim=16, query_pre_attn_scalar=24,
            sliding_window=4, layer_types=["sliding_attention", "sliding_attention", "full_attention", "sliding_attention"],
            rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 20000.0},
                             "full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1000000.0}},
            tie_word_embeddings=True), torch.bfloat16, None),
        # Qwen3-MoE: QK-norm, 8 fine-grained experts (width 32) with top-2 and norm_topk_prob (Qwen3-30B-A3B's), layer 2
        # a dense MLP of intermediate_size 96 through mlp_only_layers, a head dimension (32) that is not hidden / heads
        ("qwen3_moe", Qwen3MoeForCausalLM, Qwen3MoeConfig(
            **dict(SMALL, hidden_size=64, intermediate_size=96, num_hidden_layers=4), head_dim=32,
            moe_intermediate_size=32, num_experts=8, num_experts_per_tok=2, norm_topk_prob=True, decoder_sparse_step=1,
            mlp_only_layers=[2], tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}), torch.bfloat16, None),
        # DeepSeek-V3: multi-latent attention (4 heads, q_lora_rank 32, kv_lora_rank 16, 16 + 8 query/key channels of
        # which 8 rotate as interleaved pairs, 16 value channels) with YaRN (factor 4 over an original 64 positions,
        # mscale 1 and mscale_all_dim 0.8, so that both the cos/sin factor and the softmax scale's differ from 1);
        # layer 0 dense (first_k_dense_replace 1), layers 1-3 of 8 routed experts (width 32) top-2 with sigmoid scores,
        # a random e_score_correction_bias, 2 groups of which each token keeps 1, norm_topk_prob and routed_scaling_factor
        # 2.5, and one shared expert; bfloat16 with the bias in float32, as transformers stores it; rms_norm_eps 1e-6
        # (DeepSeek-V3's), the epsilon transformers' latent norms always take
        ("deepseek_v3", DeepseekV3ForCausalLM, DeepseekV3Config(
            **dict(SMALL, hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_key_value_heads=4, rms_norm_eps=1e-6),
            q_lora_rank=32, kv_lora_rank=16, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
            n_routed_experts=8, n_shared_experts=1, moe_intermediate_size=32, num_experts_per_tok=2, n_group=2,
            topk_group=1, routed_scaling_factor=2.5, norm_topk_prob=True, first_k_dense_replace=1,
            tie_word_embeddings=False, rope_interleave=True,
            rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                             "original_max_position_embeddings": 64, "beta_fast": 32.0, "beta_slow": 1.0,
                             "mscale": 1.0, "mscale_all_dim": 0.8}), torch.bfloat16, None),
    ]


def randomize(model, seed):
    """Every parameter random: N(0, 0.2) for weights and biases, 1 + N(0, 0.1) for norm weights."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g, dtype=torch.float32)
            if "norm" in name or ".ln_" in name:
                p.copy_(1 + 0.1 * noise if name.endswith("weight") else 0.1 * noise)
            else:
                p.copy_(0.2 * noise)
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):  # DeepSeek-V3's expert bias: a buffer, loaded and saved
                b.copy_(0.1 * torch.randn(b.shape, generator=g, dtype=torch.float32))


def main():
    torch.manual_seed(1234)
    os.makedirs(OUT, exist_ok=True)
    only = set(sys.argv[1:])
    for seed, (name, cls, config, dtype, shard) in enumerate(fixtures()):
        if only and name not in only:
            continue
        model = cls(config).eval()
        randomize(model, 1000 + seed)
        out = os.path.join(OUT, name)
        shutil.rmtree(out, ignore_errors=True)
        model.to(dtype)
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):  # float32 whatever the dtype, as transformers keeps it
                b.data = b.data.float()
        model.save_pretrained(out, **({"max_shard_size": shard} if shard else {}))
        # the reference: what transformers computes in float32 from the saved (rounded) weights
        loaded = cls.from_pretrained(out, dtype=torch.float32).eval()
        with torch.no_grad():
            logits = loaded(torch.tensor([PROMPT])).logits[0]
            # greedy, through generate()'s KV cache, never stopping at the config's eos id
            loaded.generation_config.eos_token_id = None
            loaded.generation_config.pad_token_id = 0
            # the prompt holds id 0, the pad id: an explicit mask keeps generate() from masking it out
            generated = loaded.generate(torch.tensor([PROMPT]), attention_mask=torch.ones(1, len(PROMPT), dtype=torch.long),
                                        max_new_tokens=GENERATED, do_sample=False)[0, len(PROMPT):].tolist()
        with open(os.path.join(out, "logits.json"), "w") as f:
            json.dump({"input_ids": PROMPT, "transformers": transformers.__version__,
                       "logits": [[float(v) for v in row] for row in logits], "generated": generated}, f)
            f.write("\n")
        print(name, sorted(os.listdir(out)), "logits[0][:3]", [round(float(v), 5) for v in logits[0][:3]],
              "generated", generated)


if __name__ == "__main__":
    sys.exit(main())
