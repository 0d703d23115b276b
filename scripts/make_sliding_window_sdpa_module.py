"""Writes the TorchScript archive that mcore4j's SdpaAttention loads for sliding-window layers.

The module is mcore4j's own: causal scaled-dot-product attention limited to a window, over [batch, heads,
seq, dim] queries and [batch, groups, seq, dim] keys/values (grouped-query attention when groups < heads):
the query at position i attends the keys at positions i - window .. i (Megatron-Core's window_size
(window, 0)). The window comes as a 0-dim CPU int64 tensor; the boolean mask is made on the queries'
device. libtorch picks a fused kernel that takes a mask (memory-efficient on CUDA, its math kernel on the
CPU); backward is libtorch's.

Usage: python3 scripts/make_sliding_window_sdpa_module.py \
    models/src/main/resources/io/mcore4j/models/torchscript/sliding_window_sdpa.pt
"""
import sys

import torch
import torch.nn.functional as F

from torchscript_archive import write_checked


class SlidingWindowSdpa(torch.nn.Module):
    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                window: torch.Tensor) -> torch.Tensor:
        heads = query.size(1)
        groups = key.size(1)
        if groups != heads:
            key = key.repeat_interleave(heads // groups, dim=1)
            value = value.repeat_interleave(heads // groups, dim=1)
        s = query.size(2)
        w = int(window.item())
        position = torch.arange(s, device=query.device)
        behind = position.view(s, 1) - position.view(1, s)
        allowed = (behind >= 0) & (behind <= w)
        return F.scaled_dot_product_attention(query, key, value, attn_mask=allowed)


def check(module: torch.jit.ScriptModule) -> None:
    """Against the definition in float64 (scores, window mask, softmax), with gradients, GQA and a window < s."""
    g = torch.Generator().manual_seed(3)
    q = torch.randn(2, 4, 9, 8, dtype=torch.float64, generator=g, requires_grad=True)
    k = torch.randn(2, 2, 9, 8, dtype=torch.float64, generator=g, requires_grad=True)
    v = torch.randn(2, 2, 9, 8, dtype=torch.float64, generator=g, requires_grad=True)
    for w in (0, 3, 20):
        kk = k.repeat_interleave(2, dim=1)
        vv = v.repeat_interleave(2, dim=1)
        scores = q @ kk.transpose(-1, -2) / 8 ** 0.5
        i = torch.arange(9).view(9, 1)
        j = torch.arange(9).view(1, 9)
        scores = scores.masked_fill((j > i) | (i - j > w), float("-inf"))
        want = scores.softmax(-1) @ vv
        got = module(q, k, v, torch.tensor(w))
        if not torch.allclose(got, want, atol=1e-10):
            raise SystemExit(f"window {w}: the scripted attention differs from the definition")
        grad = torch.randn_like(want)
        if not all(torch.allclose(a, b, atol=1e-10) for a, b in zip(torch.autograd.grad(want, (q, k, v), grad),
                                                                    torch.autograd.grad(got, (q, k, v), grad))):
            raise SystemExit(f"window {w}: the scripted attention's gradients differ from the definition's")


def main(path: str) -> None:
    write_checked(SlidingWindowSdpa(), check, path)


if __name__ == "__main__":
    main(sys.argv[1])
