"""How evenly a GPT's MoE routers spread tokens at initialisation, in plain PyTorch on the CPU: word and position
embeddings of std EMB_STD (Megatron's init is 0.02; nn.Embedding's default is 1.0), every other weight Megatron's
(std 0.02, output layers 0.02 / sqrt(2 L)), pre-LayerNorm blocks with causal attention and a dense GELU MLP standing
in for the experts, and after each block's attention a router of 8 experts top-2 whose choices are counted. Prints,
per layer, the tokens per expert and per EP4 rank (two experts each); an even share is 512 per rank.

Usage: python3 scripts/moe_init_routing.py [EMB_STD]   (docs/moe.md, "Routing at initialisation")
"""
import sys

import torch
import torch.nn.functional as F

LAYERS, HIDDEN, HEADS, SEQ, BATCH, VOCAB, EXPERTS, TOP_K, EP = 6, 2048, 16, 512, 2, 32768, 8, 2, 4


def main(emb_std: float) -> None:
    torch.manual_seed(0)
    normal = lambda *shape, std=0.02: torch.randn(*shape) * std
    out_std = 0.02 / (2 * LAYERS) ** 0.5
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ))
    x = normal(VOCAB, HIDDEN, std=emb_std)[tokens] + normal(SEQ, HIDDEN, std=emb_std)[None]
    for layer in range(LAYERS):
        qkv = F.layer_norm(x, (HIDDEN,)) @ normal(HIDDEN, 3 * HIDDEN)
        q, k, v = qkv.view(BATCH, SEQ, 3, HEADS, HIDDEN // HEADS).permute(2, 0, 3, 1, 4)
        attention = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(BATCH, SEQ, HIDDEN)
        x = x + attention @ normal(HIDDEN, HIDDEN, std=out_std)
        m = F.layer_norm(x, (HIDDEN,))
        chosen = (m @ normal(HIDDEN, EXPERTS)).topk(TOP_K, dim=-1).indices.flatten()
        counts = torch.bincount(chosen, minlength=EXPERTS)
        print(f"layer {layer}: tokens per expert {counts.tolist()}, per EP{EP} rank {counts.view(EP, -1).sum(1).tolist()}")
        x = x + F.gelu(m @ normal(HIDDEN, 4 * HIDDEN)) @ normal(4 * HIDDEN, HIDDEN, std=out_std)


if __name__ == "__main__":
    main(float(sys.argv[1]) if len(sys.argv) > 1 else 0.02)
