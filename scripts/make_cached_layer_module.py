"""Writes the TorchScript archive that mcore4j-inference's CachedLayer loads.

The module is mcore4j's own: one dense pre-norm transformer layer of a generation pass over a key/value
cache, the same computation as mcore4j's TransformerLayer (models) with the ops in libtorch's TorchScript
interpreter instead of one call from Java per op:

    h   = x + proj(attention(rope(qkv(norm1(x)))), cache)     attention as in make_cached_sdpa_module.py
    out = h + fc2(act(fc1(norm2(h))))

Inputs, all tensors (an empty tensor stands for an absent bias):
    x [s, b, hidden]; attention_out [s, b, hidden] (part 2 only, else empty)
    norm1_w, norm1_b, qkv_w, qkv_b, proj_w, proj_b, norm2_w, norm2_b, fc1_w, fc1_b, fc2_w, fc2_b
        the layer's own parameters (this tensor-parallel rank's shards; LayerNorm iff its bias is given;
        RMSNorm weights in float32, where the norm computes);
        proj_b and fc2_b are this rank's share of the row-parallel biases (bias / TP, added inside the GEMM
        as RowParallelLinear does)
    key_cache, value_cache [b, groups, max_len, d]: the whole caches; the pass writes positions L - s .. L - 1
    cos, sin [L, rotary_dims]: the rotary tables of positions 0 .. L - 1 (zero columns: no rotary), so
        L = cos.size(0) is the length the sequences reach with this pass; sin with its first half negated
    settings (CPU, float64): [norm epsilon, activation (0 GELU, 1 tanh GELU, 2 SwiGLU), part]
Parts, for tensor parallelism, where two partial sums are all-reduced from Java:
    0: the whole layer (one rank), returns [out]
    1: returns [proj partial sum]
    2: with attention_out = the all-reduced part 1, returns [h, fc2 partial sum]; out = h + its all-reduce

Usage: python3 scripts/make_cached_layer_module.py inference/src/main/resources/io/mcore4j/inference/torchscript/cached_layer.pt
"""
import sys
from typing import List

import torch
import torch.nn.functional as F

from make_cached_sdpa_module import attend_cached


def norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    if bias.numel() > 0:
        return F.layer_norm(x, [x.size(-1)], weight, bias, eps)
    # RMSNorm as mcore4j's Norm computes it: in float32 (the caller passes the weight in float32), cast back
    return F.rms_norm(x.float(), [x.size(-1)], weight, eps).to(x.dtype)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    # x is 2-D [tokens, in], so that a bias is added inside the GEMM (addmm), as mcore4j's Tensors.linear does
    if bias.numel() > 0:
        return F.linear(x, weight, bias)
    return F.linear(x, weight)


def rotate(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    # x * cos + (-x2, x1) * sin, written as x * cos + (x2, x1) * (-sin, sin): rolling by half swaps the halves
    dims = cos.size(-1)
    rot = x.narrow(-1, 0, dims)
    rotated = rot * cos + rot.roll(dims // 2, -1) * signed_sin
    if dims == x.size(-1):
        return rotated
    return torch.cat((rotated, x.narrow(-1, dims, x.size(-1) - dims)), -1)


class CachedLayer(torch.nn.Module):
    def forward(self, x: torch.Tensor, attention_out: torch.Tensor,
                norm1_w: torch.Tensor, norm1_b: torch.Tensor, qkv_w: torch.Tensor, qkv_b: torch.Tensor,
                proj_w: torch.Tensor, proj_b: torch.Tensor, norm2_w: torch.Tensor, norm2_b: torch.Tensor,
                fc1_w: torch.Tensor, fc1_b: torch.Tensor, fc2_w: torch.Tensor, fc2_b: torch.Tensor,
                key_cache: torch.Tensor, value_cache: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                settings: torch.Tensor) -> List[torch.Tensor]:
        values: List[float] = settings.tolist()
        eps = values[0]
        activation = int(values[1])
        part = int(values[2])
        s = x.size(0)
        b = x.size(1)
        hidden = x.size(2)
        tokens = x.reshape(s * b, hidden)
        if part != 2:
            groups = key_cache.size(1)
            d = key_cache.size(3)
            length = cos.size(0)
            mixed = linear(norm(tokens, norm1_w, norm1_b, eps), qkv_w, qkv_b)
            per_group = mixed.size(1) // (groups * d) - 2
            grouped = mixed.view(s, b, groups, per_group + 2, d)
            if cos.size(1) > 0:
                # a group's query heads and its key head are adjacent: one rotation for both
                c = cos.narrow(0, length - s, s).view(s, 1, 1, 1, cos.size(1))
                n = sin.narrow(0, length - s, s).view(s, 1, 1, 1, sin.size(1))
                rotated = rotate(grouped.narrow(3, 0, per_group + 1), c, n)
                query = rotated.narrow(3, 0, per_group).reshape(s, b, groups * per_group, d)
                key = rotated.select(3, per_group)
            else:
                query = grouped.narrow(3, 0, per_group).reshape(s, b, groups * per_group, d)
                key = grouped.select(3, per_group)
            value = grouped.select(3, per_group + 1)
            context = attend_cached(query, key, value, key_cache.narrow(2, 0, length), value_cache.narrow(2, 0, length))
            attention = linear(context.view(s * b, context.size(2)), proj_w, proj_b)
            if part == 1:
                return [attention.view(s, b, hidden)]
        else:
            attention = attention_out.reshape(s * b, hidden)
        h = tokens + attention
        up = linear(norm(h, norm2_w, norm2_b, eps), fc1_w, fc1_b)
        if activation == 2:
            gate, value_half = up.chunk(2, -1)
            act = F.silu(gate) * value_half
        elif activation == 1:
            act = F.gelu(up, approximate="tanh")
        else:
            act = F.gelu(up)
        mlp = linear(act, fc2_w, fc2_b)
        if part == 2:
            return [h.view(s, b, hidden), mlp.view(s, b, hidden)]
        return [(h + mlp).view(s, b, hidden)]


def main(path: str) -> None:
    module = torch.jit.script(CachedLayer())
    module.save(path)
    print(f"wrote {path} with torch {torch.__version__}")


if __name__ == "__main__":
    main(sys.argv[1])
