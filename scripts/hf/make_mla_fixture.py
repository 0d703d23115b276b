#!/usr/bin/env python3
"""Makes the fixture of hf-bridge's MultiLatentAttentionTest: one DeepSeek-V3 multi-latent attention layer
(transformers' DeepseekV3Attention, eager) at a tiny size with random weights, its input and its output. MLA is
tested on its own before a DeepseekV3ForCausalLM maps: q_a_proj -> q_a_layernorm -> q_b_proj gives each head its
non-rotated (qk_nope_head_dim) and rotated (qk_rope_head_dim) query channels; kv_a_proj_with_mqa gives the latent
(kv_lora_rank, normalised by kv_a_layernorm, expanded per head by kv_b_proj into keys' non-rotated channels and
values of v_head_dim) and one rotated key shared by every head; RoPE on DeepSeek's interleaved pairs
(rope_interleave); scores scaled by (qk_nope_head_dim + qk_rope_head_dim)^-1/2; causal.

Run from the repository root:  /tmp/tv/bin/python scripts/hf/make_mla_fixture.py   (transformers 5)
Output: hf-bridge/src/test/resources/hf/deepseek_v3_attention/{attention.safetensors, attention.json}: the
attention's weights under their transformers names (float32), the dimensions, the input [batch, seq, hidden] and
the output transformers computed, both float32.
"""
import json
import os
import sys

import torch
import transformers
from safetensors.torch import save_file
from transformers import DeepseekV3Config
from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3Attention, DeepseekV3RotaryEmbedding

OUT = os.path.join("hf-bridge", "src", "test", "resources", "hf", "deepseek_v3_attention")
DIMS = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=24, kv_lora_rank=16,
            qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=12, rms_norm_eps=1e-6)
ROPE_THETA = 10000.0
BATCH, SEQ = 2, 8


def main():
    config = DeepseekV3Config(**DIMS, vocab_size=100, num_hidden_layers=1, max_position_embeddings=64,
                              rope_interleave=True, attention_bias=False,
                              rope_parameters={"rope_type": "default", "rope_theta": ROPE_THETA})
    config._attn_implementation = "eager"
    attention = DeepseekV3Attention(config, 0).eval()
    g = torch.Generator().manual_seed(39)
    with torch.no_grad():
        for name, p in attention.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            p.copy_(1 + 0.1 * noise if "norm" in name else 0.2 * noise)
        x = torch.randn(BATCH, SEQ, DIMS["hidden_size"], generator=g)
        positions = torch.arange(SEQ).unsqueeze(0).expand(BATCH, -1)
        cos, sin = DeepseekV3RotaryEmbedding(config)(x, positions)
        mask = torch.full((SEQ, SEQ), float("-inf")).triu(1).expand(BATCH, 1, SEQ, SEQ)
        y, _ = attention(x, position_embeddings=(cos, sin), attention_mask=mask)
    os.makedirs(OUT, exist_ok=True)
    save_file({n: p.detach().contiguous() for n, p in attention.named_parameters()},
              os.path.join(OUT, "attention.safetensors"))
    with open(os.path.join(OUT, "attention.json"), "w") as f:
        json.dump({"transformers": transformers.__version__, "dims": DIMS, "rope_theta": ROPE_THETA,
                   "input": x.tolist(), "output": y.tolist()}, f)
        f.write("\n")
    print(sorted(n for n, _ in attention.named_parameters()), "output[0][0][:3]", y[0, 0, :3].tolist())


if __name__ == "__main__":
    sys.exit(main())
