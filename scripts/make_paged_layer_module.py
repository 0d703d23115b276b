"""Writes the TorchScript archive that mcore4j-inference's paged engine runs each dense layer with (paged_layer.pt).

The module is mcore4j's own: make_cached_layer_module.py's layer (norm, QKV, rotary, attention, projection,
residuals, MLP, with the same parts 0/1/2 for tensor parallelism) over a paged key/value cache, vLLM's layout:
a pool of fixed-size blocks per layer and, per sequence, a block table naming the blocks that hold its
positions in order. Every sequence of the pass has its own positions, so sequences of any lengths run together.

Three methods. What depends only on the pass's positions and block tables is the same for every layer, so a pass
computes it once (pass_inputs) and hands it to every layer's forward:
    rotation_tables(cos_table, sin_table) -> [a_table, b_table] [max_len, 2, rot], once per cache: from the rotary
        tables [max_len, rot] (zero columns: no rotary; sin with its first half negated), the two factors of the
        rotation of a channel pair (x1, x2) = (x[j], x[j + rot/2]): (y1, y2) = x1 * a + x2 * b, with
        a = (cos, sin), b = (-sin, cos) in row 0 (queries and keys) and a = (1, 0), b = (0, 1) in row 1 (values,
        which the keys' kernel passes through unchanged)
    pass_inputs(a_table, b_table, positions, block_tables, layout) -> [rotation_a, rotation_b, written, read, mask]:
        positions [b, s] int64: position of each token of the pass (row i of x's sequence axis, column b)
        block_tables [b, w] int64: sequence b's blocks; position p sits in block block_tables[b, p // block_size]
            at offset p % block_size; entries past the sequence's blocks are 0 (the null block, masked)
        layout (CPU, int64): [block_size, query heads per key/value group]
        rotation_a, rotation_b [s * b, 2 * rot]: each token's rows of the tables, in x's order (sequence axis first)
        written [b * s] int64: the pool slot (block * block_size + offset) of each token, sequence by sequence
        read [b * w * block_size] int64: the slots of each sequence's blocks, in order
        mask [b, 1, per_group * s, w * block_size], the tables' dtype: 0 where query i may see slot j
            (j <= positions[b, i]), -65504 elsewhere; row p * s + i for query head p of a group (the layout of the
            queries in attend_paged); the additive form of the boolean mask, made once per pass instead of by
            SDPA in every layer (libtorch converts a boolean mask for cuDNN with the same value)
    forward(x, attention_out, the layer's parameters, kv_pool, rotation_a, rotation_b, written, read, mask,
            settings): see make_cached_layer_module.py for x, attention_out, the parameters and settings
            ([norm epsilon, activation, part], CPU float64), except that RMSNorm weights come in the activations'
            dtype (the norm computes in float32 all the same);
        kv_pool [num_blocks, block_size, 2, groups, d]: the layer's whole pool of keys (index 0 of its third axis)
            and values (index 1), so that a pass writes and gathers both in one op each; block 0 is the null block
            that padded rows write to and that no sequence owns

The pass writes its keys and values at their slots (index_copy_ into the pool viewed as slots), gathers each
sequence's w * block_size slots and attends under the mask: the same shapes for every decode step of a batch size
(what a CUDA graph replays), any shapes in eager prefill.

RMSNorm weights come in the activations' dtype: on a GPU libtorch's fused RMSNorm kernel reads the activations as
they are and computes in float32 (no cast kernels around it); on the CPU the norm casts to float32 and back around
rms_norm, as the contiguous layer does (make_cached_layer_module's norm).

The check (before saving and after loading back) runs the module in float32 on the CPU against the contiguous
layer, with full, half and no rotary; where CUDA is available also in float16 on the GPU (the fused RMSNorm, the
additive mask under cuDNN's attention), within 2e-2 of the float32 reference: on a GPU host, write a scratch copy
(any path) to run that check.

Usage: PYTHONPATH=scripts python3 scripts/make_paged_layer_module.py \
    inference/src/main/resources/io/mcore4j/inference/torchscript/paged_layer.pt
"""
import sys
from typing import List, Tuple

import torch
import torch.nn.functional as F

from make_cached_layer_module import cached_layer, linear, mlp_part, norm
from torchscript_archive import write_checked


def rotate(x: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Rotates x's first rot channels in pairs (j, j + rot/2); a and b [..., 2, rot/2] broadcast against x's pairs.

    (y1, y2) = x1 * (cos, sin) + x2 * (-sin, cos): the same products and sums as x * cos + roll(x) * signed sin,
    without the roll's copies: one elementwise kernel over views of x."""
    dims = a.size(-1) * 2
    pairs = x.narrow(-1, 0, dims).unflatten(-1, [2, dims // 2])
    rotated = (pairs.narrow(-2, 0, 1) * a + pairs.narrow(-2, 1, 1) * b).flatten(-2)
    if dims == x.size(-1):
        return rotated
    return torch.cat((rotated, x.narrow(-1, dims, x.size(-1) - dims)), -1)


def paged_inputs(tokens: torch.Tensor, s: int, b: int, norm1_w: torch.Tensor, norm1_b: torch.Tensor,
                 qkv_w: torch.Tensor, qkv_b: torch.Tensor, groups: int, d: int, rotation_a: torch.Tensor,
                 rotation_b: torch.Tensor, eps: float, in_dtype: bool) -> Tuple[torch.Tensor, torch.Tensor]:
    """Queries [s, b, heads, d] (contiguous) and the keys and values [s, b, 2, groups, d].

    The queries and the keys-and-values are rotated apart, each pass writing a contiguous tensor (the values by the
    identity rows of the tables); without rotary the keys and values are a view of the QKV output."""
    mixed = linear(norm(tokens, norm1_w, norm1_b, eps, in_dtype), qkv_w, qkv_b)
    per_group = mixed.size(1) // (groups * d) - 2
    grouped = mixed.view(s, b, groups, per_group + 2, d)
    query = grouped.narrow(3, 0, per_group)
    kv = grouped.narrow(3, per_group, 2).transpose(2, 3)
    rot = rotation_a.size(1) // 2
    if rot > 0:
        a = rotation_a.view(s, b, 2, 1, 2, rot // 2)
        n = rotation_b.view(s, b, 2, 1, 2, rot // 2)
        query = rotate(query, a.narrow(2, 0, 1), n.narrow(2, 0, 1))
        kv = rotate(kv, a, n)
    return query.reshape(s, b, groups * per_group, d), kv


def attend_paged(query: torch.Tensor, kv: torch.Tensor, kv_pool: torch.Tensor, written: torch.Tensor,
                 read: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Writes the pass's keys and values at their slots, gathers each sequence's slots and attends, masked."""
    s = query.size(0)
    b = query.size(1)
    heads = query.size(2)
    d = query.size(3)
    groups = kv_pool.size(3)
    per_group = heads // groups
    width = mask.size(3)
    slots = kv_pool.view(-1, 2, groups, d)
    slots.index_copy_(0, written, kv.transpose(0, 1).reshape(b * s, 2, groups, d))
    # keys and values [b, groups, width, d] with unit head stride d and position stride 2 * groups * d: the layout
    # of a packed key/value tensor, read by SDPA as it is
    gathered = slots.index_select(0, read).view(b, width, 2, groups, d)
    keys = gathered.select(2, 0).transpose(1, 2)
    values = gathered.select(2, 1).transpose(1, 2)
    # a group's query heads stacked along the query axis (row p * s + i), as make_cached_layer_module's attend_static
    q = query.reshape(s, b, groups, per_group, d).permute(1, 2, 3, 0, 4).reshape(b, groups, per_group * s, d)
    out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)
    return out.view(b, groups, per_group, s, d).permute(3, 0, 1, 2, 4).reshape(s, b, heads * d)


class PagedLayer(torch.nn.Module):
    def forward(self, x: torch.Tensor, attention_out: torch.Tensor,
                norm1_w: torch.Tensor, norm1_b: torch.Tensor, qkv_w: torch.Tensor, qkv_b: torch.Tensor,
                proj_w: torch.Tensor, proj_b: torch.Tensor, norm2_w: torch.Tensor, norm2_b: torch.Tensor,
                fc1_w: torch.Tensor, fc1_b: torch.Tensor, fc2_w: torch.Tensor, fc2_b: torch.Tensor,
                kv_pool: torch.Tensor, rotation_a: torch.Tensor, rotation_b: torch.Tensor,
                written: torch.Tensor, read: torch.Tensor, mask: torch.Tensor,
                settings: torch.Tensor) -> List[torch.Tensor]:
        values: List[float] = settings.tolist()
        eps = values[0]
        activation = int(values[1])
        part = int(values[2])
        s = x.size(0)
        b = x.size(1)
        hidden = x.size(2)
        tokens = x.reshape(s * b, hidden)
        # on CUDA the RMSNorm weights come in x's dtype (libtorch's fused kernel reads x without casts)
        cuda = x.is_cuda
        if part != 2:
            query, kv = paged_inputs(tokens, s, b, norm1_w, norm1_b, qkv_w, qkv_b, kv_pool.size(3), kv_pool.size(4),
                                     rotation_a, rotation_b, eps, cuda and norm1_w.dtype == x.dtype)
            context = attend_paged(query, kv, kv_pool, written, read, mask)
            attention = linear(context.view(s * b, context.size(2)), proj_w, proj_b)
            if part == 1:
                return [attention.view(s, b, hidden)]
        else:
            attention = attention_out.reshape(s * b, hidden)
        return mlp_part(tokens, attention, s, b, hidden, norm2_w, norm2_b, fc1_w, fc1_b, fc2_w, fc2_b, eps,
                        activation, part, cuda and norm2_w.dtype == x.dtype)

    @torch.jit.export
    def rotation_tables(self, cos_table: torch.Tensor, sin_table: torch.Tensor) -> List[torch.Tensor]:
        half = cos_table.size(1) // 2
        a = torch.cat((cos_table.narrow(1, 0, half), sin_table.narrow(1, half, half)), 1)
        b = torch.cat((sin_table.narrow(1, 0, half), cos_table.narrow(1, half, half)), 1)
        ones = torch.ones_like(a.narrow(1, 0, half))
        zeros = torch.zeros_like(ones)
        # row 0 rotates keys (and queries), row 1 is the identity for values: (y1, y2) = x1 * (1, 0) + x2 * (0, 1)
        return [torch.stack((a, torch.cat((ones, zeros), 1)), 1), torch.stack((b, torch.cat((zeros, ones), 1)), 1)]

    @torch.jit.export
    def pass_inputs(self, a_table: torch.Tensor, b_table: torch.Tensor, positions: torch.Tensor,
                    block_tables: torch.Tensor, layout: torch.Tensor) -> List[torch.Tensor]:
        sizes: List[int] = layout.tolist()
        block_size = sizes[0]
        per_group = sizes[1]
        s = positions.size(1)
        flat = positions.transpose(0, 1).reshape(-1)
        rotation_a = a_table.flatten(1).index_select(0, flat)
        rotation_b = b_table.flatten(1).index_select(0, flat)
        # token (b, i) goes to slot block_tables[b, p // block_size] * block_size + p % block_size, p = positions[b, i]
        blocks = block_tables.gather(1, torch.div(positions, block_size, rounding_mode="floor"))
        written = (blocks * block_size + torch.remainder(positions, block_size)).reshape(-1)
        offsets = torch.arange(block_size, dtype=torch.int64, device=block_tables.device)
        read = (block_tables.unsqueeze(2) * block_size + offsets).reshape(-1)
        width = block_tables.size(1) * block_size
        slots = torch.arange(width, dtype=torch.int64, device=positions.device)
        allowed = slots.view(1, 1, width) <= positions.unsqueeze(2)
        if per_group > 1:
            allowed = allowed.repeat(1, per_group, 1)
        mask = torch.zeros([allowed.size(0), 1, per_group * s, width], dtype=a_table.dtype, device=a_table.device)
        # -65504 (float16's lowest) rather than -inf, as libtorch's own conversion for cuDNN does: exp underflows to 0
        # all the same, every row having an allowed slot (slot 0 always is)
        mask.masked_fill_(allowed.logical_not().unsqueeze(1), -65504.0)
        return [rotation_a, rotation_b, written, read, mask]
def rotary_tables(rot: int, d: int, length: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """cos and sin [length, rot] as KvCache.rotaryTables makes them: sin with its first half negated."""
    inv = 1.0 / (10000 ** (torch.arange(0, rot, 2, dtype=torch.float32) / d))
    angles = torch.outer(torch.arange(length, dtype=torch.float32), inv)
    angles = torch.cat((angles, angles), -1)
    return angles.cos(), torch.cat((-angles.sin()[:, : rot // 2], angles.sin()[:, rot // 2:]), -1)


def check_on(module: torch.jit.ScriptModule, rot: int, device: str, dtype: torch.dtype, tolerance: float) -> None:
    """Two sequences of lengths 5 and 3 over scattered blocks against the contiguous layer of make_cached_layer_module
    in float32 on the CPU: a prefill of all but each one's last token, then both last tokens as one decode step."""
    torch.manual_seed(0)
    hidden, heads, groups, d, ffn, block_size = 16, 4, 2, 4, 24, 2
    w = [torch.rand(hidden) + 0.5, torch.empty(0), torch.randn(groups * (heads // groups + 2) * d, hidden) * 0.3,
         torch.empty(0), torch.randn(hidden, heads * d) * 0.3, torch.empty(0), torch.rand(hidden) + 0.5,
         torch.empty(0), torch.randn(2 * ffn, hidden) * 0.3, torch.empty(0), torch.randn(hidden, ffn) * 0.3,
         torch.empty(0)]
    settings = torch.tensor([1e-5, 2.0, 0.0], dtype=torch.float64)
    lengths = [5, 3]
    cos_t, sin_t = rotary_tables(rot, d, 8)
    tables = torch.tensor([[7, 2, 5, 0], [3, 8, 0, 0]])
    xs = [torch.randn(n, 1, hidden) for n in lengths]
    refs = []
    for b, n in enumerate(lengths):
        ref_k = torch.zeros(1, groups, 8, d)
        ref_v = torch.zeros(1, groups, 8, d)
        refs.append(cached_layer(xs[b], torch.empty(0), *w, ref_k, ref_v, cos_t[:n], sin_t[:n], torch.arange(n),
                                 torch.arange(8).view(1, 8) <= torch.arange(n).view(n, 1), settings)[0])

    def on(t: torch.Tensor) -> torch.Tensor:
        return t.to(device=device, dtype=dtype if t.is_floating_point() else t.dtype)

    wd = [on(t) for t in w]
    pool = on(torch.zeros(9, block_size, 2, groups, d))
    a_t, b_t = module.rotation_tables(on(cos_t), on(sin_t))
    layout = torch.tensor([block_size, heads // groups])

    def run(x: torch.Tensor, positions: torch.Tensor, block_tables: torch.Tensor) -> torch.Tensor:
        inputs = module.pass_inputs(a_t, b_t, on(positions), on(block_tables), layout)
        return module(on(x), on(torch.empty(0)), *wd, pool, *inputs, settings)[0].float().cpu()

    for b, n in enumerate(lengths):
        first = run(xs[b][: n - 1], torch.arange(n - 1).view(1, n - 1), tables[b: b + 1])
        torch.testing.assert_close(first, refs[b][: n - 1], rtol=tolerance, atol=tolerance)
    last = torch.cat([xs[b][n - 1:] for b, n in enumerate(lengths)], 1)
    out = run(last, torch.tensor([[4], [2]]), tables)
    for b, n in enumerate(lengths):
        torch.testing.assert_close(out[:, b: b + 1], refs[b][n - 1:], rtol=tolerance, atol=tolerance)


def check(module: torch.jit.ScriptModule) -> None:
    """Full, half and no rotary in float32 on the CPU; on a GPU host also in float16 there (the fused RMSNorm)."""
    for rot in (4, 2, 0):
        check_on(module, rot, "cpu", torch.float32, 1e-5)
        if torch.cuda.is_available():
            check_on(module, rot, "cuda", torch.float16, 2e-2)


def main(path: str) -> None:
    write_checked(PagedLayer(), check, path)


if __name__ == "__main__":
    main(sys.argv[1])
