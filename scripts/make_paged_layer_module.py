"""Writes the TorchScript archive that mcore4j-inference's paged engine runs each dense layer with (paged_layer.pt).

The module is mcore4j's own: make_cached_layer_module.py's layer (norm, QKV, rotary, attention, projection,
residuals, MLP, with the same parts 0/1/2 for tensor parallelism) over a paged key/value cache, vLLM's layout:
a pool of fixed-size blocks per layer and, per sequence, a block table naming the blocks that hold its
positions in order. Every sequence of the pass has its own positions, so sequences of any lengths run together.

Inputs after the layer's parameters (see make_cached_layer_module.py for x, attention_out and the parameters):
    key_pool, value_pool [num_blocks, block_size, groups, d]: the layer's whole pools; block 0 is the null
        block that padded rows write to and that no sequence owns
    cos_table, sin_table [max_len, rotary_dims]: the rotary tables of every position (zero columns: no rotary),
        sin with its first half negated
    positions [b, s] int64: position of each token of the pass (row i of x's sequence axis, column b)
    block_tables [b, w] int64: sequence b's blocks; position p sits in block block_tables[b, p // block_size]
        at offset p % block_size; entries past the sequence's blocks are 0 (the null block, masked)
    settings (CPU, float64): [norm epsilon, activation, part]

The pass writes its keys and values at its positions' slots (index_copy_ into the pool viewed as slots), gathers
each sequence's w * block_size slots by its block table, and attends under the mask slot j <= positions[b, i]:
the same shapes for every decode step of a batch size (what a CUDA graph replays), any shapes in eager prefill.

Usage: PYTHONPATH=scripts python3 scripts/make_paged_layer_module.py \
    inference/src/main/resources/io/mcore4j/inference/torchscript/paged_layer.pt
"""
import sys
from typing import List, Tuple

import torch
import torch.nn.functional as F

from make_cached_layer_module import attention_inputs, cached_layer, linear, mlp_part
from torchscript_archive import write_checked


def paged_inputs(tokens: torch.Tensor, s: int, b: int, norm1_w: torch.Tensor, norm1_b: torch.Tensor,
                 qkv_w: torch.Tensor, qkv_b: torch.Tensor, groups: int, d: int, cos: torch.Tensor,
                 sin: torch.Tensor, eps: float) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Queries [s, b, heads, d], keys and values [s, b, groups, d]; cos, sin: each token's rows [s * b, rot].

    The contiguous layer's attention_inputs over the s * b tokens as a pass of one sequence: every token its own
    rotary row, the same memory order as [s, b]."""
    query, key, value = attention_inputs(tokens, s * b, 1, norm1_w, norm1_b, qkv_w, qkv_b, groups, d, cos, sin, eps)
    return (query.view(s, b, query.size(2), d), key.view(s, b, groups, d), value.reshape(s, b, groups, d))


def attend_paged(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, key_pool: torch.Tensor,
                 value_pool: torch.Tensor, positions: torch.Tensor, block_tables: torch.Tensor) -> torch.Tensor:
    """Writes the pass's keys and values at their slots, gathers each sequence's blocks and attends, masked."""
    s = query.size(0)
    b = query.size(1)
    heads = query.size(2)
    d = query.size(3)
    block_size = key_pool.size(1)
    groups = key_pool.size(2)
    per_group = heads // groups
    key_slots = key_pool.view(-1, groups, d)
    value_slots = value_pool.view(-1, groups, d)
    # token (b, i) goes to slot block_tables[b, p // block_size] * block_size + p % block_size, p = positions[b, i]
    blocks = block_tables.gather(1, torch.div(positions, block_size, rounding_mode="floor"))
    written = (blocks * block_size + torch.remainder(positions, block_size)).reshape(-1)
    key_slots.index_copy_(0, written, key.transpose(0, 1).reshape(b * s, groups, d))
    value_slots.index_copy_(0, written, value.transpose(0, 1).reshape(b * s, groups, d))
    width = block_tables.size(1) * block_size
    offsets = torch.arange(block_size, dtype=torch.int64, device=block_tables.device)
    read = (block_tables.unsqueeze(2) * block_size + offsets).reshape(-1)
    keys = key_slots.index_select(0, read).view(b, width, groups, d).transpose(1, 2)
    values = value_slots.index_select(0, read).view(b, width, groups, d).transpose(1, 2)
    slots = torch.arange(width, dtype=torch.int64, device=positions.device)
    allowed = slots.view(1, 1, width) <= positions.unsqueeze(2)
    # a group's query heads stacked along the query axis (row p * s + i), as make_cached_layer_module's attend_static
    q = query.reshape(s, b, groups, per_group, d).permute(1, 2, 3, 0, 4).reshape(b, groups, per_group * s, d)
    mask = (allowed.repeat(1, per_group, 1) if per_group > 1 else allowed).unsqueeze(1)
    out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)
    return out.view(b, groups, per_group, s, d).permute(3, 0, 1, 2, 4).reshape(s, b, heads * d)


class PagedLayer(torch.nn.Module):
    def forward(self, x: torch.Tensor, attention_out: torch.Tensor,
                norm1_w: torch.Tensor, norm1_b: torch.Tensor, qkv_w: torch.Tensor, qkv_b: torch.Tensor,
                proj_w: torch.Tensor, proj_b: torch.Tensor, norm2_w: torch.Tensor, norm2_b: torch.Tensor,
                fc1_w: torch.Tensor, fc1_b: torch.Tensor, fc2_w: torch.Tensor, fc2_b: torch.Tensor,
                key_pool: torch.Tensor, value_pool: torch.Tensor, cos_table: torch.Tensor, sin_table: torch.Tensor,
                positions: torch.Tensor, block_tables: torch.Tensor, settings: torch.Tensor) -> List[torch.Tensor]:
        values: List[float] = settings.tolist()
        eps = values[0]
        activation = int(values[1])
        part = int(values[2])
        s = x.size(0)
        b = x.size(1)
        hidden = x.size(2)
        tokens = x.reshape(s * b, hidden)
        if part != 2:
            # each token's rotary rows [s * b, rot], in x's order (sequence axis first)
            flat = positions.transpose(0, 1).reshape(-1)
            cos = cos_table.index_select(0, flat)
            sin = sin_table.index_select(0, flat)
            query, key, value = paged_inputs(tokens, s, b, norm1_w, norm1_b, qkv_w, qkv_b, key_pool.size(2),
                                             key_pool.size(3), cos, sin, eps)
            context = attend_paged(query, key, value, key_pool, value_pool, positions, block_tables)
            attention = linear(context.view(s * b, context.size(2)), proj_w, proj_b)
            if part == 1:
                return [attention.view(s, b, hidden)]
        else:
            attention = attention_out.reshape(s * b, hidden)
        return mlp_part(tokens, attention, s, b, hidden, norm2_w, norm2_b, fc1_w, fc1_b, fc2_w, fc2_b, eps,
                        activation, part)


def check(module: torch.jit.ScriptModule) -> None:
    """Two sequences of lengths 5 and 3 over scattered blocks against the contiguous layer of make_cached_layer_module."""
    torch.manual_seed(0)
    hidden, heads, groups, d, ffn, block_size = 16, 4, 2, 4, 24, 2
    w = [torch.ones(hidden), torch.empty(0), torch.randn(groups * (heads // groups + 2) * d, hidden) * 0.3,
         torch.empty(0), torch.randn(hidden, heads * d) * 0.3, torch.empty(0), torch.ones(hidden), torch.empty(0),
         torch.randn(2 * ffn, hidden) * 0.3, torch.empty(0), torch.randn(hidden, ffn) * 0.3, torch.empty(0)]
    settings = torch.tensor([1e-5, 2.0, 0.0], dtype=torch.float64)
    lengths = [5, 3]
    inv = 1.0 / (10000 ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    angles = torch.outer(torch.arange(8, dtype=torch.float32), inv)
    angles = torch.cat((angles, angles), -1)
    cos_t = angles.cos()
    sin_t = torch.cat((-angles.sin()[:, : d // 2], angles.sin()[:, d // 2:]), -1)
    pool_k = torch.zeros(9, block_size, groups, d)
    pool_v = torch.zeros(9, block_size, groups, d)
    tables = torch.tensor([[7, 2, 5, 0], [3, 8, 0, 0]])
    xs = [torch.randn(n, 1, hidden) for n in lengths]
    for b, n in enumerate(lengths):
        ref_k = torch.zeros(1, groups, 8, d)
        ref_v = torch.zeros(1, groups, 8, d)
        ref = cached_layer(xs[b], torch.empty(0), *w, ref_k, ref_v, cos_t[:n], sin_t[:n], torch.arange(n),
                           torch.arange(8).view(1, 8) <= torch.arange(n).view(n, 1), settings)[0]
        # a prefill of all but the last token, then the last as a decode step beside the other sequence's
        first = module(xs[b][: n - 1], torch.empty(0), *w, pool_k, pool_v, cos_t, sin_t,
                       torch.arange(n - 1).view(1, n - 1), tables[b: b + 1], settings)[0]
        torch.testing.assert_close(first, ref[: n - 1], rtol=1e-5, atol=1e-5)
    last = torch.cat([xs[b][n - 1:] for b, n in enumerate(lengths)], 1)
    out = module(last, torch.empty(0), *w, pool_k, pool_v, cos_t, sin_t, torch.tensor([[4], [2]]), tables, settings)[0]
    for b, n in enumerate(lengths):
        ref_k = torch.zeros(1, groups, 8, d)
        ref_v = torch.zeros(1, groups, 8, d)
        ref = cached_layer(xs[b], torch.empty(0), *w, ref_k, ref_v, cos_t[:n], sin_t[:n], torch.arange(n),
                           torch.arange(8).view(1, 8) <= torch.arange(n).view(n, 1), settings)[0]
        torch.testing.assert_close(out[:, b: b + 1], ref[n - 1:], rtol=1e-5, atol=1e-5)


def main(path: str) -> None:
    write_checked(PagedLayer(), check, path)


if __name__ == "__main__":
    main(sys.argv[1])
