"""Writes the TorchScript archives that mcore4j-inference's CachedLayer loads (two forms of one layer).

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

Two modules, the same layer:
    CachedLayer (cached_layer.pt): the inputs above; the caches are narrowed to L in the module, so every
        decode step has other shapes (run it without the graph executor's optimisation, which would
        re-specialise it on every call).
    StaticCachedLayer (static_cached_layer.pt): the same shapes on every decode step, so that libtorch's
        profiling executor specialises and fuses it once per pass length (prefill, then single tokens):
        key_cache, value_cache [b, groups, max_len, d], the whole caches, attended whole under a mask;
        cos, sin [s, rotary_dims]: the rotary rows of the pass's positions only;
        positions [s] int64 (the pass's positions L - s .. L - 1, on the caches' device), where the pass's
        keys and values are written (index_copy_, no host read of L);
        allowed [s, max_len] bool: position j is attended by the pass's query i iff j <= positions[i]
        (every unwritten position is masked, so the zeros there never count);
        the other inputs as above, after sin: ..., cos, sin, positions, allowed, settings.

Usage: python3 scripts/make_cached_layer_module.py \
    inference/src/main/resources/io/mcore4j/inference/torchscript/cached_layer.pt \
    inference/src/main/resources/io/mcore4j/inference/torchscript/static_cached_layer.pt
"""
import sys
from typing import List, Optional, Tuple

import torch
import torch.nn.functional as F

from make_cached_sdpa_module import attend_cached


def norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float, in_dtype: bool = False) -> torch.Tensor:
    if bias.numel() > 0:
        return F.layer_norm(x, [x.size(-1)], weight, bias, eps)
    if in_dtype:
        # the paged layer on CUDA, its RMSNorm weights in x's dtype: libtorch's fused CUDA kernel reads x as it is,
        # computes and scales in float32 and rounds once, as the casts below do, without their two kernels. The
        # cached layers never pass it: the literal default folds this branch out of their graphs.
        return F.rms_norm(x, [x.size(-1)], weight, eps)
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


def attention_inputs(tokens: torch.Tensor, s: int, b: int, norm1_w: torch.Tensor, norm1_b: torch.Tensor,
                     qkv_w: torch.Tensor, qkv_b: torch.Tensor, groups: int, d: int, cos: torch.Tensor,
                     sin: torch.Tensor, eps: float) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Queries [s, b, heads, d], keys and values [s, b, groups, d] of the pass; cos, sin: the pass's rows [s, rot]."""
    mixed = linear(norm(tokens, norm1_w, norm1_b, eps), qkv_w, qkv_b)
    per_group = mixed.size(1) // (groups * d) - 2
    grouped = mixed.view(s, b, groups, per_group + 2, d)
    if cos.size(1) > 0:
        # a group's query heads and its key head are adjacent: one rotation for both
        c = cos.view(s, 1, 1, 1, cos.size(1))
        n = sin.view(s, 1, 1, 1, sin.size(1))
        rotated = rotate(grouped.narrow(3, 0, per_group + 1), c, n)
        query = rotated.narrow(3, 0, per_group).reshape(s, b, groups * per_group, d)
        key = rotated.select(3, per_group)
    else:
        query = grouped.narrow(3, 0, per_group).reshape(s, b, groups * per_group, d)
        key = grouped.select(3, per_group)
    return query, key, grouped.select(3, per_group + 1)


def mlp_part(tokens: torch.Tensor, attention: torch.Tensor, s: int, b: int, hidden: int, norm2_w: torch.Tensor,
             norm2_b: torch.Tensor, fc1_w: torch.Tensor, fc1_b: torch.Tensor, fc2_w: torch.Tensor,
             fc2_b: torch.Tensor, eps: float, activation: int, part: int, in_dtype: bool = False) -> List[torch.Tensor]:
    """The residual and MLP after attention [s * b, hidden]: [out] (part 0) or [h, fc2 partial sum] (part 2);
    in_dtype: norm's RMSNorm on weights in x's dtype."""
    h = tokens + attention
    up = linear(norm(h, norm2_w, norm2_b, eps, in_dtype), fc1_w, fc1_b)
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


def attend_static(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor,
                  value_cache: torch.Tensor, positions: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """Writes the pass's keys and values at `positions` of the whole caches and attends over all of them, masked."""
    s = query.size(0)
    b = query.size(1)
    heads = query.size(2)
    d = query.size(3)
    groups = key_cache.size(1)
    per_group = heads // groups
    key_cache.index_copy_(2, positions, key.permute(1, 2, 0, 3))
    value_cache.index_copy_(2, positions, value.permute(1, 2, 0, 3))
    # a group's query heads stacked along the query axis (row p * s + i: head p of the group, query i): plain
    # attention of `groups` heads, which CUDA's memory-efficient kernel runs with a mask (its grouped-query
    # form, enable_gqa, takes none, and the flash kernel takes no mask: SDPA would fall back to its unfused math)
    q = query.reshape(s, b, groups, per_group, d).permute(1, 2, 3, 0, 4).reshape(b, groups, per_group * s, d)
    mask = allowed.repeat(per_group, 1) if per_group > 1 else allowed
    out = F.scaled_dot_product_attention(q, key_cache, value_cache, attn_mask=mask)
    return out.view(b, groups, per_group, s, d).permute(3, 0, 1, 2, 4).reshape(s, b, heads * d)


def cached_layer(x: torch.Tensor, attention_out: torch.Tensor,
                 norm1_w: torch.Tensor, norm1_b: torch.Tensor, qkv_w: torch.Tensor, qkv_b: torch.Tensor,
                 proj_w: torch.Tensor, proj_b: torch.Tensor, norm2_w: torch.Tensor, norm2_b: torch.Tensor,
                 fc1_w: torch.Tensor, fc1_b: torch.Tensor, fc2_w: torch.Tensor, fc2_b: torch.Tensor,
                 key_cache: torch.Tensor, value_cache: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                 positions: Optional[torch.Tensor], allowed: Optional[torch.Tensor],
                 settings: torch.Tensor) -> List[torch.Tensor]:
    """Both modules' layer: over narrowed caches without positions and mask, over the whole caches with them."""
    values: List[float] = settings.tolist()
    eps = values[0]
    activation = int(values[1])
    part = int(values[2])
    s = x.size(0)
    b = x.size(1)
    hidden = x.size(2)
    tokens = x.reshape(s * b, hidden)
    if part != 2:
        if positions is not None and allowed is not None:
            query, key, value = attention_inputs(tokens, s, b, norm1_w, norm1_b, qkv_w, qkv_b, key_cache.size(1),
                                                 key_cache.size(3), cos, sin, eps)
            context = attend_static(query, key, value, key_cache, value_cache, positions, allowed)
        else:
            length = cos.size(0)
            query, key, value = attention_inputs(tokens, s, b, norm1_w, norm1_b, qkv_w, qkv_b, key_cache.size(1),
                                                 key_cache.size(3), cos.narrow(0, length - s, s),
                                                 sin.narrow(0, length - s, s), eps)
            context = attend_cached(query, key, value, key_cache.narrow(2, 0, length), value_cache.narrow(2, 0, length))
        attention = linear(context.view(s * b, context.size(2)), proj_w, proj_b)
        if part == 1:
            return [attention.view(s, b, hidden)]
    else:
        attention = attention_out.reshape(s * b, hidden)
    return mlp_part(tokens, attention, s, b, hidden, norm2_w, norm2_b, fc1_w, fc1_b, fc2_w, fc2_b, eps,
                    activation, part)


class CachedLayer(torch.nn.Module):
    """Caches narrowed to the length L a pass reaches: shapes change on every decode step."""

    def forward(self, x: torch.Tensor, attention_out: torch.Tensor,
                norm1_w: torch.Tensor, norm1_b: torch.Tensor, qkv_w: torch.Tensor, qkv_b: torch.Tensor,
                proj_w: torch.Tensor, proj_b: torch.Tensor, norm2_w: torch.Tensor, norm2_b: torch.Tensor,
                fc1_w: torch.Tensor, fc1_b: torch.Tensor, fc2_w: torch.Tensor, fc2_b: torch.Tensor,
                key_cache: torch.Tensor, value_cache: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                settings: torch.Tensor) -> List[torch.Tensor]:
        return cached_layer(x, attention_out, norm1_w, norm1_b, qkv_w, qkv_b, proj_w, proj_b, norm2_w, norm2_b,
                            fc1_w, fc1_b, fc2_w, fc2_b, key_cache, value_cache, cos, sin, None, None, settings)


class StaticCachedLayer(torch.nn.Module):
    """The whole caches, masked: the same shapes on every decode step (the profiling executor specialises once)."""

    def forward(self, x: torch.Tensor, attention_out: torch.Tensor,
                norm1_w: torch.Tensor, norm1_b: torch.Tensor, qkv_w: torch.Tensor, qkv_b: torch.Tensor,
                proj_w: torch.Tensor, proj_b: torch.Tensor, norm2_w: torch.Tensor, norm2_b: torch.Tensor,
                fc1_w: torch.Tensor, fc1_b: torch.Tensor, fc2_w: torch.Tensor, fc2_b: torch.Tensor,
                key_cache: torch.Tensor, value_cache: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                positions: torch.Tensor, allowed: torch.Tensor, settings: torch.Tensor) -> List[torch.Tensor]:
        return cached_layer(x, attention_out, norm1_w, norm1_b, qkv_w, qkv_b, proj_w, proj_b, norm2_w, norm2_b,
                            fc1_w, fc1_b, fc2_w, fc2_b, key_cache, value_cache, cos, sin, positions, allowed,
                            settings)


def main(path: str, static_path: str) -> None:
    for module, out in ((CachedLayer(), path), (StaticCachedLayer(), static_path)):
        torch.jit.script(module).save(out)
        print(f"wrote {out} with torch {torch.__version__}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
