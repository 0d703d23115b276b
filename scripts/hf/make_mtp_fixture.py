#!/usr/bin/env python3
"""Makes the fixture of hf-bridge's MultiTokenPredictionReferenceTest: a tiny GPT with two multi-token prediction
depths, written here in plain torch from the semantics (DeepSeek-V3 report section 2.2 as Megatron-Core's
MultiTokenPredictionBlock implements it), not from any library's code:

  main model: tied embedding, 2 pre-norm layers (RMSNorm eps 1e-6; grouped-query attention with RoPE rotating
  each head's two halves; SwiGLU MLP; no biases), the final norm h0 = final_layernorm(x), logits = h0 E^T, and the
  main loss sum(ce * mask) / max(1, sum(mask)).
  depth k = 1..D: tokens, labels and mask shifted one more position earlier (the last positions take 0),
  h_k = final_layernorm_k(layer_k(eh_proj_k([enorm_k(E[tokens_k]); hnorm_k(h_{k-1})]))), logits_k = h_k E^T,
  loss_k = sum(ce_k * mask_k) / max(1, sum(mask_k)); the training objective adds factor / D * sum_k loss_k.

Weights are stored under mcore4j's (Megatron-Core's) keys and layouts: the fused QKV grouped per query group
(its query heads, then its key head, then its value head), fc1 as [gate; up].

Run from the repository root:  /tmp/tv/bin/python scripts/hf/make_mtp_fixture.py
Output: hf-bridge/src/test/resources/hf/mtp_reference/{weights.safetensors, reference.json}: the weights
(float32), the tokens, labels and loss mask [seq][batch], the main loss, each depth's loss, the factor, and the
gradients of the whole objective for a few tensors.
"""
import json
import os

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

OUT = os.path.join("hf-bridge", "src", "test", "resources", "hf", "mtp_reference")
LAYERS, HIDDEN, HEADS, GROUPS, VOCAB, DEPTHS = 2, 32, 4, 2, 64, 2
HEAD_DIM = HIDDEN // HEADS
FFN = 4 * HIDDEN
EPS, BASE, FACTOR = 1e-6, 10000.0, 0.3
SEQ, BATCH = 8, 2
GRADIENTS = ["embedding.word_embeddings.weight", "mtp.layers.0.eh_proj.weight", "mtp.layers.1.final_layernorm.weight",
             "mtp.layers.0.transformer_layer.self_attention.linear_qkv.weight"]


def layer_weights(g, prefix):
    w = {}
    w[prefix + "input_layernorm.weight"] = 1 + 0.1 * torch.randn(HIDDEN, generator=g)
    w[prefix + "self_attention.linear_qkv.weight"] = 0.2 * torch.randn((HEADS + 2 * GROUPS) * HEAD_DIM, HIDDEN, generator=g)
    w[prefix + "self_attention.linear_proj.weight"] = 0.2 * torch.randn(HIDDEN, HEADS * HEAD_DIM, generator=g)
    w[prefix + "pre_mlp_layernorm.weight"] = 1 + 0.1 * torch.randn(HIDDEN, generator=g)
    w[prefix + "mlp.linear_fc1.weight"] = 0.2 * torch.randn(2 * FFN, HIDDEN, generator=g)
    w[prefix + "mlp.linear_fc2.weight"] = 0.1 * torch.randn(HIDDEN, FFN, generator=g)
    return w


def make_weights(g):
    w = {"embedding.word_embeddings.weight": 0.5 * torch.randn(VOCAB, HIDDEN, generator=g)}
    for i in range(LAYERS):
        w.update(layer_weights(g, f"decoder.layers.{i}."))
    w["decoder.final_layernorm.weight"] = 1 + 0.1 * torch.randn(HIDDEN, generator=g)
    for k in range(DEPTHS):
        p = f"mtp.layers.{k}."
        w[p + "enorm.weight"] = 1 + 0.1 * torch.randn(HIDDEN, generator=g)
        w[p + "hnorm.weight"] = 1 + 0.1 * torch.randn(HIDDEN, generator=g)
        w[p + "eh_proj.weight"] = 0.2 * torch.randn(HIDDEN, 2 * HIDDEN, generator=g)
        w.update(layer_weights(g, p + "transformer_layer."))
        w[p + "final_layernorm.weight"] = 1 + 0.1 * torch.randn(HIDDEN, generator=g)
    return w


def rms_norm(x, weight):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * weight


def rotate(x):
    """RoPE on [s, b, heads, d]: each head's first half pairs with its second half."""
    s, d = x.shape[0], x.shape[-1]
    inv = 1.0 / (BASE ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    angles = torch.arange(s, dtype=torch.float64)[:, None] * inv[None, :]
    angles = torch.cat([angles, angles], -1)[:, None, None, :]
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    first, second = x[..., : d // 2], x[..., d // 2:]
    return x * cos + torch.cat([-second, first], -1) * sin


def layer(x, w, p):
    s, b, _ = x.shape
    h = rms_norm(x, w[p + "input_layernorm.weight"])
    per_group = HEADS // GROUPS
    qkv = (h @ w[p + "self_attention.linear_qkv.weight"].T).view(s, b, GROUPS, per_group + 2, HEAD_DIM)
    q = qkv[:, :, :, :per_group].reshape(s, b, HEADS, HEAD_DIM)
    k = qkv[:, :, :, per_group].repeat_interleave(per_group, dim=2)
    v = qkv[:, :, :, per_group + 1].repeat_interleave(per_group, dim=2)
    q, k = rotate(q), rotate(k)
    scores = torch.einsum("sbnd,tbnd->bnst", q, k) / HEAD_DIM ** 0.5
    causal = torch.ones(s, s, dtype=torch.bool).tril()
    probs = scores.masked_fill(~causal, float("-inf")).softmax(-1)
    context = torch.einsum("bnst,tbnd->sbnd", probs, v).reshape(s, b, HEADS * HEAD_DIM)
    x = x + context @ w[p + "self_attention.linear_proj.weight"].T
    h = rms_norm(x, w[p + "pre_mlp_layernorm.weight"])
    gate, up = (h @ w[p + "mlp.linear_fc1.weight"].T).chunk(2, -1)
    return x + (F.silu(gate) * up) @ w[p + "mlp.linear_fc2.weight"].T


def masked_loss(logits, labels, mask):
    ce = F.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1), reduction="none").view(labels.shape)
    return (ce * mask).sum() / mask.sum().clamp(min=1)


def shift(x):
    """One position earlier along the sequence (dim 0), the last position 0."""
    return torch.cat([x[1:], torch.zeros_like(x[:1])], 0)


def forward(w, tokens, labels, mask):
    embed = w["embedding.word_embeddings.weight"]
    x = embed[tokens]
    for i in range(LAYERS):
        x = layer(x, w, f"decoder.layers.{i}.")
    h = rms_norm(x, w["decoder.final_layernorm.weight"])
    main = masked_loss(h @ embed.T, labels, mask)
    depth_losses = []
    for k in range(DEPTHS):
        p = f"mtp.layers.{k}."
        tokens, labels, mask = shift(tokens), shift(labels), shift(mask)
        joined = torch.cat([rms_norm(embed[tokens], w[p + "enorm.weight"]), rms_norm(h, w[p + "hnorm.weight"])], -1)
        h = layer(joined @ w[p + "eh_proj.weight"].T, w, p + "transformer_layer.")
        h = rms_norm(h, w[p + "final_layernorm.weight"])
        depth_losses.append(masked_loss(h @ embed.T, labels, mask))
    return main, depth_losses


def main():
    g = torch.Generator().manual_seed(39)
    weights = {k: v.contiguous() for k, v in make_weights(g).items()}
    tokens = torch.randint(0, VOCAB, (SEQ, BATCH), generator=g)
    labels = torch.randint(0, VOCAB, (SEQ, BATCH), generator=g)
    mask = (torch.rand(SEQ, BATCH, generator=g) > 0.2).float()
    params = {k: v.clone().double().requires_grad_(True) for k, v in weights.items()}
    main_loss, depth_losses = forward(params, tokens, labels, mask.double())
    objective = main_loss + FACTOR / DEPTHS * sum(depth_losses)
    objective.backward()
    os.makedirs(OUT, exist_ok=True)
    save_file(weights, os.path.join(OUT, "weights.safetensors"))
    reference = {
        "layers": LAYERS, "hidden": HIDDEN, "heads": HEADS, "groups": GROUPS, "vocab": VOCAB, "depths": DEPTHS,
        "eps": EPS, "rotary_base": BASE, "factor": FACTOR,
        "tokens": tokens.tolist(), "labels": labels.tolist(), "loss_mask": mask.tolist(),
        "main_loss": main_loss.item(), "depth_losses": [l.item() for l in depth_losses],
        "gradients": {k: params[k].grad.reshape(-1).tolist() for k in GRADIENTS},
    }
    with open(os.path.join(OUT, "reference.json"), "w") as f:
        json.dump(reference, f)
    print("main loss", main_loss.item(), "depth losses", [l.item() for l in depth_losses])


if __name__ == "__main__":
    main()
