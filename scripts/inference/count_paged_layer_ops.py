"""Counts the aten ops one decode step of the paged layer module runs per layer, and once per step, on the CPU.

Runs an archive (default: the committed paged_layer.pt) under torch.profiler at a decode step of one sequence
(s = 1, b = 1) in float16, with the 1.1B LLaMA's proportions scaled down (8 query heads per key/value group,
full rotary, SwiGLU, RMSNorm, no biases, 16-position blocks, 512 positions), and prints the ops called by the
module's own code (not their internals): all of them, and those that do work (view ops and no-op casts left out;
a reshape counts when it copies). An archive from before the per-pass inputs (its forward takes the rotary tables,
positions and block tables) is run the same way, for a before/after count:

    git show 7f9a507^:inference/src/main/resources/io/mcore4j/inference/torchscript/paged_layer.pt > /tmp/before.pt
    /tmp/tv/bin/python scripts/inference/count_paged_layer_ops.py /tmp/before.pt
    /tmp/tv/bin/python scripts/inference/count_paged_layer_ops.py

The CPU counts include RMSNorm's casts to float32 and back (before: the input and the result per norm; now also the
float16 weight); on a GPU the current module's norm runs without any (libtorch's fused kernel reads float16), six
ops fewer per layer than printed for it.
"""
import collections
import sys

import torch
from torch.profiler import ProfilerActivity, profile

VIEWS = {"aten::view", "aten::narrow", "aten::select", "aten::slice", "aten::transpose", "aten::permute",
         "aten::unsqueeze", "aten::unflatten", "aten::flatten", "aten::expand", "aten::as_strided", "aten::t",
         "aten::alias", "aten::size", "aten::detach", "aten::_unsafe_view", "aten::chunk", "aten::split",
         "aten::lift_fresh", "aten::numel", "aten::item", "aten::_local_scalar_dense", "aten::numpy_T", "aten::contiguous"}


def top_level(prof) -> list:
    """The module's own op calls: aten events with no aten ancestor; reshape/to/contiguous only when they copy."""
    ops = []
    for e in prof.events():
        if not e.name.startswith("aten::"):
            continue
        parent = e.cpu_parent
        while parent is not None and not parent.name.startswith("aten::"):
            parent = parent.cpu_parent
        if parent is None:
            ops.append(e)
    return ops


def copies(e) -> bool:
    stack = list(e.cpu_children)
    while stack:
        c = stack.pop()
        if c.name in ("aten::clone", "aten::copy_", "aten::_to_copy"):
            return True
        stack.extend(c.cpu_children)
    return False


def report(title: str, prof) -> None:
    ops = top_level(prof)
    work = [e for e in ops if e.name not in VIEWS and (e.name not in ("aten::reshape", "aten::to") or copies(e))]
    print(f"{title}: {len(ops)} aten ops, {len(work)} doing work")
    for name, n in sorted(collections.Counter(e.name for e in work).items()):
        print(f"    {n:3d} {name}")


def main(path: str) -> None:
    torch.manual_seed(0)
    half = torch.float16
    hidden, heads, groups, d, ffn, block_size, blocks = 128, 16, 2, 8, 352, 16, 32
    width = blocks
    per_group = heads // groups
    module = torch.jit.load(path)
    w = [torch.rand(hidden), torch.empty(0), torch.randn(groups * (per_group + 2) * d, hidden) * 0.1,
         torch.empty(0), torch.randn(hidden, heads * d) * 0.1, torch.empty(0), torch.rand(hidden),
         torch.empty(0), torch.randn(2 * ffn, hidden) * 0.1, torch.empty(0), torch.randn(hidden, ffn) * 0.1,
         torch.empty(0)]
    w = [t.to(half) for t in w]
    settings = torch.tensor([1e-5, 2.0, 0.0], dtype=torch.float64)
    x = torch.randn(1, 1, hidden, dtype=half)
    pool_k = torch.zeros(blocks + 1, block_size, groups, d, dtype=half)
    pool_v = torch.zeros(blocks + 1, block_size, groups, d, dtype=half)
    inv = 1.0 / (10000 ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    angles = torch.outer(torch.arange(block_size * width, dtype=torch.float32), inv)
    angles = torch.cat((angles, angles), -1)
    cos = angles.cos().to(half)
    sin = torch.cat((-angles.sin()[:, : d // 2], angles.sin()[:, d // 2:]), -1).to(half)
    positions = torch.tensor([[100]])
    tables = torch.arange(1, width + 1).view(1, width)
    new = hasattr(module, "pass_inputs")
    with torch.jit.optimized_execution(False), torch.no_grad():
        if new:
            pool = torch.zeros(blocks + 1, block_size, 2, groups, d, dtype=half)
            a_t, b_t = module.rotation_tables(cos, sin)
            layout = torch.tensor([block_size, per_group])
            for _ in range(2):
                p = module.pass_inputs(a_t, b_t, positions, tables, layout)
                module(x, torch.empty(0, dtype=half), *w, pool, *p, settings)
            with profile(activities=[ProfilerActivity.CPU]) as step:
                p = module.pass_inputs(a_t, b_t, positions, tables, layout)
            report("once per step (pass_inputs)", step)
            args = [x, torch.empty(0, dtype=half), *w, pool, *p, settings]
            with profile(activities=[ProfilerActivity.CPU]) as layer:
                module(*args)
        else:
            w[0], w[6] = w[0].float(), w[6].float()  # its RMSNorm weights in float32, as CachedLayer passed them
            args = [x, torch.empty(0, dtype=half), *w, pool_k, pool_v, cos, sin, positions, tables, settings]
            for _ in range(2):
                module(*args)
            with profile(activities=[ProfilerActivity.CPU]) as layer:
                module(*args)
    report("per layer (forward)", layer)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else
         "inference/src/main/resources/io/mcore4j/inference/torchscript/paged_layer.pt")
