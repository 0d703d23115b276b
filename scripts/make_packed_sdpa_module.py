"""Writes the TorchScript archive that mcore4j's SdpaAttention loads for packed sequences.

The module is mcore4j's own: attention over several sequences packed into each batch column, a query
attending only the keys of its own sequence up to itself. Inputs: queries [batch, heads, seq, dim],
keys and values [batch, groups, seq, dim] (grouped-query attention when groups < heads), the THD
layout's cumulative sequence lengths cu_seqlens (int32 on the queries' device: the batch columns'
tokens one after another, [batch, seq] flattened, and the offsets of all their sequences from 0 to
batch * seq) and the longest sequence's length (a 0-dim CPU int64 tensor, so no device is read for it).

The kernel is picked by device when the module runs:
- CUDA, float16/bfloat16, head dims that are multiples of 8 up to 256: libtorch's variable-length
  flash attention, aten::_flash_attention_forward with cum_seq_q = cum_seq_k = cu_seqlens over the
  [batch * seq, heads, dim] token stream (causal within each sequence); its autograd formula is
  aten::_flash_attention_backward;
- elsewhere (the CPU, float32 on CUDA): scaled_dot_product_attention with a block-diagonal causal
  boolean mask [batch, 1, seq, seq] made from cu_seqlens.

Usage: python3 scripts/make_packed_sdpa_module.py models/src/main/resources/io/mcore4j/models/torchscript/packed_sdpa.pt
       python3 scripts/make_packed_sdpa_module.py models/src/main/resources/io/mcore4j/models/torchscript/packed_sdpa.pt --check-cuda
       (on a GPU host: the committed archive against its definition on CUDA, float32, float16 and bfloat16)
"""
import math
import sys
from typing import List

import torch
import torch.nn.functional as F

from torchscript_archive import write_checked


def _repeat_groups(x: torch.Tensor, heads: int) -> torch.Tensor:
    groups = x.size(1)
    if groups == heads:
        return x
    return x.repeat_interleave(heads // groups, dim=1)


class PackedSdpa(torch.nn.Module):
    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, cu_seqlens: torch.Tensor,
                max_seqlen: torch.Tensor) -> torch.Tensor:
        batch = query.size(0)
        heads = query.size(1)
        seq = query.size(2)
        dim = query.size(3)
        key = _repeat_groups(key, heads)
        value = _repeat_groups(value, heads)
        flash_dtype = query.dtype == torch.float16 or query.dtype == torch.bfloat16
        if query.is_cuda and flash_dtype and dim % 8 == 0 and dim <= 256:
            longest = int(max_seqlen.item())
            q = query.transpose(1, 2).reshape(batch * seq, heads, dim)
            k = key.transpose(1, 2).reshape(batch * seq, heads, dim)
            v = value.transpose(1, 2).reshape(batch * seq, heads, dim)
            out = torch.ops.aten._flash_attention_forward(q, k, v, cu_seqlens, cu_seqlens, longest, longest, 0.0, True,
                                                          False, scale=1.0 / math.sqrt(dim))[0]
            return out.reshape(batch, seq, heads, dim).transpose(1, 2)
        tokens = torch.arange(batch * seq, dtype=cu_seqlens.dtype, device=query.device)
        ids = torch.bucketize(tokens, cu_seqlens[1:], right=True).reshape(batch, 1, seq)
        positions = torch.arange(seq, device=query.device)
        mask = (ids.unsqueeze(3) == ids.unsqueeze(2)) & (positions.unsqueeze(1) >= positions.unsqueeze(0))
        return F.scaled_dot_product_attention(query, key, value, attn_mask=mask)


def _cumulative(lengths: List[List[int]], device: str) -> torch.Tensor:
    out = [0]
    for column in lengths:
        for n in column:
            out.append(out[-1] + n)
    return torch.tensor(out, dtype=torch.int32, device=device)


def _reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lengths: List[List[int]]) -> torch.Tensor:
    """Each sequence alone under a causal mask, in float64, put back in place."""
    heads = q.size(1)
    k = _repeat_groups(k, heads).double()
    v = _repeat_groups(v, heads).double()
    q = q.double()
    out = torch.zeros_like(q)
    for b, column in enumerate(lengths):
        start = 0
        for n in column:
            part = slice(start, start + n)
            scores = q[b, :, part] @ k[b, :, part].transpose(-1, -2) / math.sqrt(q.size(-1))
            scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
            out[b, :, part] = scores.softmax(-1) @ v[b, :, part]
            start += n
    return out


def check(module: torch.jit.ScriptModule, device: str = "cpu", dtype: torch.dtype = torch.float32) -> None:
    """Output and the query, key and value gradients against each sequence attended alone."""
    tol = 1e-5 if dtype == torch.float32 else 3e-2
    lengths = [[5, 1, 7, 3], [16], [2, 14]]
    for heads, groups in ((4, 4), (4, 2)):
        q = torch.randn(3, heads, 16, 8).to(device, dtype).requires_grad_()
        k = torch.randn(3, groups, 16, 8).to(device, dtype).requires_grad_()
        v = torch.randn(3, groups, 16, 8).to(device, dtype).requires_grad_()
        longest = torch.tensor(max(max(c) for c in lengths), dtype=torch.int64)
        got = module(q, k, v, _cumulative(lengths, device), longest)
        want = _reference(q, k, v, lengths)
        if got.shape != q.shape or got.dtype != dtype:
            raise SystemExit(f"packed attention returned {got.shape} {got.dtype} for {q.shape} {dtype}")
        if not torch.allclose(got.double(), want, atol=tol):
            raise SystemExit(f"packed attention (heads {heads}/{groups}, {device} {dtype}) differs from its definition")
        g = torch.randn_like(want)
        got_grads = torch.autograd.grad(got, (q, k, v), g.to(dtype))
        want_grads = torch.autograd.grad(want, (q, k, v), g)
        for name, a, b in zip(("query", "key", "value"), got_grads, want_grads):
            if not torch.allclose(a.double(), b.double(), atol=tol * max(1.0, b.abs().max().item())):
                raise SystemExit(f"packed attention's {name} gradient (heads {heads}/{groups}, {device} {dtype})"
                                 " differs from its definition's")


def main(path: str) -> None:
    if len(sys.argv) > 2 and sys.argv[2] == "--check-cuda":
        module = torch.jit.load(path)
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            check(module, "cuda", dtype)
            print(f"cuda {dtype}: output and gradients match")
        return
    write_checked(PackedSdpa(), check, path)


if __name__ == "__main__":
    main(sys.argv[1])
