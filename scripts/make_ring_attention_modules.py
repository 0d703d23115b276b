"""Writes the two TorchScript archives that mcore4j's fused ring attention (context-parallel's
AttentionBlockKernel) loads: one block of attention that returns its log-sum-exp, and that block's backward.

A block is one query chunk against one key/value chunk of equal length ([batch, heads, c, dim] queries,
[batch, groups, c, dim] keys and values; grouped-query attention when groups < heads), either causal (the
diagonal chunk of the ring) or unmasked. The forward returns the block's output in float32 and its
log-sum-exp [batch, heads, c] in float32. The backward takes the upstream gradient, the block's inputs and
the *merged* output and log-sum-exp of the query chunk over all its key chunks (the standard ring-attention
backward: with the global log-sum-exp each block's probabilities are the global softmax's), and returns the
query, key and value gradients in float32 (key and value gradients summed over the heads of each group).

Each call is one libtorch fused kernel, picked by device and dtype when the module runs, and on CUDA in half
precision by the caller's flag:
- CPU: aten::_scaled_dot_product_flash_attention_for_cpu and its _backward;
- CUDA, float16/bfloat16, flag bit 1 set: aten::_scaled_dot_product_cudnn_attention and its _backward (cuDNN's
  fused attention, which libtorch's SDPA prefers on Hopper and which is about twice as fast there as the
  flash kernel below; its log-sum-exp is [batch, heads, c, 1]);
- CUDA, float16/bfloat16, bit 1 clear: aten::_scaled_dot_product_flash_attention and its _backward;
- CUDA, float32: aten::_scaled_dot_product_efficient_attention and its _backward (flash has no float32).
The kernels take equal heads, so grouped keys and values are repeated per head inside the call (the ring
exchanges them unrepeated). TorchScript cannot write an undefined tensor, which the CUDA backward ops take
for "dense, no bias" arguments: the module takes them from a one-token flash call, whose results for
cum_seq_q/cum_seq_k are undefined and whose philox state is unused without dropout.
The flag is a 0-dim CPU int64 tensor, so no device is read for it: bit 0 causal, bit 1 cuDNN (the caller
clears it after cuDNN refused a call, e.g. a head dimension it has no kernel for).

Usage: python3 scripts/make_ring_attention_modules.py context-parallel/src/main/resources/io/mcore4j/contextparallel/torchscript
"""
import math
import os
import sys
from typing import List, Tuple

import torch

from torchscript_archive import write_checked


def _repeat_groups(x: torch.Tensor, heads: int) -> torch.Tensor:
    groups = x.size(1)
    if groups == heads:
        return x
    return x.repeat_interleave(heads // groups, dim=1)


def _sum_groups(x: torch.Tensor, groups: int) -> torch.Tensor:
    heads = x.size(1)
    if groups == heads:
        return x
    return x.reshape(x.size(0), groups, heads // groups, x.size(2), x.size(3)).sum(2)


def _dense_flash_arguments(like: torch.Tensor) -> List[torch.Tensor]:
    """[cum_seq_q, cum_seq_k, philox_seed, philox_offset] of a dense flash call without dropout."""
    tiny = torch.zeros([1, 1, 1, 8], dtype=torch.float16, device=like.device)
    r = torch.ops.aten._scaled_dot_product_flash_attention(tiny, tiny, tiny, 0.0, False, False)
    return [r[2], r[3], r[6], r[7]]


class AttentionBlock(torch.nn.Module):
    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                causal: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        flag = int(causal.item())
        is_causal = flag % 2 == 1
        heads = query.size(1)
        key = _repeat_groups(key, heads)
        value = _repeat_groups(value, heads)
        scale = 1.0 / math.sqrt(query.size(-1))
        if query.is_cuda:
            if (query.dtype == torch.float16 or query.dtype == torch.bfloat16) and flag >= 2:
                d = torch.ops.aten._scaled_dot_product_cudnn_attention(query.contiguous(), key.contiguous(),
                                                                        value.contiguous(), None, True, 0.0, is_causal,
                                                                        False, scale=scale)
                return d[0].float(), d[1].reshape(query.size(0), heads, query.size(2)).contiguous()
            if query.dtype == torch.float16 or query.dtype == torch.bfloat16:
                f = torch.ops.aten._scaled_dot_product_flash_attention(query, key, value, 0.0, is_causal, False,
                                                                        scale=scale)
                return f[0].float(), f[1].contiguous()
            e = torch.ops.aten._scaled_dot_product_efficient_attention(query, key, value, None, True, 0.0, is_causal,
                                                                        scale=scale)
            # the memory-efficient kernel pads the log-sum-exp's sequence dim to a multiple of 32
            return e[0].float(), e[1][:, :, :query.size(2)].contiguous()
        c = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(query, key, value, 0.0, is_causal,
                                                                        attn_mask=None, scale=scale)
        return c[0].float(), c[1].float().contiguous()


class AttentionBlockBackward(torch.nn.Module):
    def forward(self, grad_out: torch.Tensor, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                out: torch.Tensor, lse: torch.Tensor, causal: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        flag = int(causal.item())
        is_causal = flag % 2 == 1
        heads = query.size(1)
        groups = key.size(1)
        key = _repeat_groups(key, heads)
        value = _repeat_groups(value, heads)
        scale = 1.0 / math.sqrt(query.size(-1))
        grad_out = grad_out.to(query.dtype)
        out = out.to(query.dtype)
        if query.is_cuda:
            dense = _dense_flash_arguments(query)
            if (query.dtype == torch.float16 or query.dtype == torch.bfloat16) and flag >= 2:
                # undefined attn_bias and cumulative lengths, unused philox state (no dropout) from the flash call
                d = torch.ops.aten._scaled_dot_product_cudnn_attention_backward(
                    grad_out.contiguous(), query.contiguous(), key.contiguous(), value.contiguous(), out.contiguous(),
                    lse.unsqueeze(-1).contiguous(), dense[2], dense[3], dense[0], dense[0], dense[1], query.size(2),
                    key.size(2), 0.0, is_causal, scale=scale)
                dq, dk, dv = d[0], d[1], d[2]
            elif query.dtype == torch.float16 or query.dtype == torch.bfloat16:
                g = torch.ops.aten._scaled_dot_product_flash_attention_backward(
                    grad_out, query, key, value, out, lse, dense[0], dense[1], query.size(2), key.size(2), 0.0,
                    is_causal, dense[2], dense[3], scale=scale)
                dq, dk, dv = g[0], g[1], g[2]
            else:
                s = query.size(2)
                padded = (s + 31) // 32 * 32
                lse_padded = torch.cat([lse, lse.new_zeros([lse.size(0), lse.size(1), padded - s])], 2)
                philox = torch.empty([], dtype=torch.int64)
                e = torch.ops.aten._scaled_dot_product_efficient_attention_backward(
                    grad_out, query, key, value, dense[0], out, lse_padded, philox, philox, 0.0,
                    [True, True, True, False], is_causal, scale=scale)
                dq, dk, dv = e[0], e[1], e[2]
        else:
            c = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
                grad_out, query, key, value, out, lse, 0.0, is_causal, attn_mask=None, scale=scale)
            dq, dk, dv = c[0], c[1], c[2]
        return dq.float(), _sum_groups(dk.float(), groups), _sum_groups(dv.float(), groups)


def _reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> Tuple[torch.Tensor, torch.Tensor]:
    """Composed attention in float64: output and log-sum-exp."""
    heads = q.size(1)
    k = _repeat_groups(k, heads).double()
    v = _repeat_groups(v, heads).double()
    scores = q.double() @ k.transpose(-1, -2) / math.sqrt(q.size(-1))
    if causal:
        s = q.size(2)
        scores = scores.masked_fill(torch.ones(s, s, dtype=torch.bool).triu(1), float("-inf"))
    lse = scores.logsumexp(-1)
    return (scores - lse.unsqueeze(-1)).exp() @ v, lse


def _flag(causal: bool, cudnn: bool = False) -> torch.Tensor:
    return torch.tensor((1 if causal else 0) + (2 if cudnn else 0), dtype=torch.int64)


def check_forward(module: torch.jit.ScriptModule, device: str = "cpu", dtype: torch.dtype = torch.float32,
                  cudnn: bool = False) -> None:
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    for heads, groups in ((4, 4), (4, 2)):
        q = torch.randn(2, heads, 16, 8).to(device, dtype)
        k = torch.randn(2, groups, 16, 8).to(device, dtype)
        v = torch.randn(2, groups, 16, 8).to(device, dtype)
        for causal in (False, True):
            out, lse = module(q, k, v, _flag(causal, cudnn))
            want, want_lse = _reference(q.cpu(), k.cpu(), v.cpu(), causal)
            if out.dtype != torch.float32 or lse.dtype != torch.float32 or lse.shape != want_lse.shape:
                raise SystemExit(f"attention block returned {out.dtype} {lse.dtype} {lse.shape}")
            if not (torch.allclose(out.cpu().double(), want, atol=tol) and torch.allclose(lse.cpu().double(), want_lse, atol=tol)):
                raise SystemExit(f"attention block (causal={causal}, heads {heads}/{groups}, {device} {dtype}, cudnn={cudnn})"
                                 " differs from its definition")


def check_backward(module: torch.jit.ScriptModule, device: str = "cpu", dtype: torch.dtype = torch.float32,
                   cudnn: bool = False) -> None:
    """Two key blocks as the ring sees them (an earlier one unmasked, the diagonal one causal): the blocks'
    gradients taken with the merged output and log-sum-exp equal autograd's through the whole attention."""
    tol = 1e-5 if dtype == torch.float32 else 5e-2
    forward = torch.jit.script(AttentionBlock())
    for heads, groups in ((4, 4), (4, 2)):
        c = 16
        q = torch.randn(2, heads, c, 8).to(device, dtype)
        k = torch.randn(2, groups, 2 * c, 8).to(device, dtype)
        v = torch.randn(2, groups, 2 * c, 8).to(device, dtype)
        g = torch.randn(2, heads, c, 8).to(device, dtype)
        blocks = [(k[:, :, :c], v[:, :, :c], False), (k[:, :, c:], v[:, :, c:], True)]
        parts = [forward(q, kb, vb, _flag(causal, cudnn)) for kb, vb, causal in blocks]
        lse = torch.logsumexp(torch.stack([p[1] for p in parts]), 0)
        out = sum((p[1] - lse).exp().unsqueeze(-1) * p[0] for p in parts)
        dq = torch.zeros(q.shape, dtype=torch.float32, device=device)
        dk = []
        dv = []
        for kb, vb, causal in blocks:
            r = module(g, q, kb, vb, out.to(dtype), lse, _flag(causal, cudnn))
            dq += r[0]
            dk.append(r[1])
            dv.append(r[2])
        # the reference: query chunk = the second half of a 2c sequence under a causal mask
        qr = q.cpu().double().requires_grad_()
        kr = k.cpu().double().requires_grad_()
        vr = v.cpu().double().requires_grad_()
        kk = _repeat_groups(kr, heads)
        vv = _repeat_groups(vr, heads)
        scores = qr @ kk.transpose(-1, -2) / math.sqrt(8)
        mask = torch.arange(2 * c).unsqueeze(0) > (torch.arange(c) + c).unsqueeze(1)
        want = scores.masked_fill(mask, float("-inf")).softmax(-1) @ vv
        wq, wk, wv = torch.autograd.grad(want, (qr, kr, vr), g.cpu().double())
        got = [dq, torch.cat(dk, 2), torch.cat(dv, 2)]
        for name, a, b in zip(("query", "key", "value"), got, (wq, wk, wv)):
            if a.dtype != torch.float32 or not torch.allclose(a.cpu().double(), b, atol=tol * max(1.0, b.abs().max().item())):
                raise SystemExit(f"{name} gradient of the blocks (heads {heads}/{groups}, {device} {dtype}) differs from autograd's")
        if not torch.allclose(out.cpu().double(), want.detach(), atol=tol):
            raise SystemExit(f"the merged output differs from the whole attention's ({device} {dtype})")


def main(folder: str) -> None:
    if len(sys.argv) > 2 and sys.argv[2] == "--check-cuda":
        # on a GPU host: the committed archives against their definitions on CUDA, for each kernel
        fwd = torch.jit.load(os.path.join(folder, "attention_block.pt"))
        bwd = torch.jit.load(os.path.join(folder, "attention_block_backward.pt"))
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            for cudnn in ((False, True) if dtype != torch.float32 else (False,)):
                check_forward(fwd, "cuda", dtype, cudnn)
                check_backward(bwd, "cuda", dtype, cudnn)
                print(f"cuda {dtype}{' cudnn' if cudnn else ''}: forward and backward match")
        return
    write_checked(AttentionBlock(), check_forward, os.path.join(folder, "attention_block.pt"))
    write_checked(AttentionBlockBackward(), check_backward, os.path.join(folder, "attention_block_backward.pt"))


if __name__ == "__main__":
    main(sys.argv[1])
