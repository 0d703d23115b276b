"""The host's microseconds per call of mcore4j's MoE archives and of single libtorch ops on a CUDA device, at tiny
shapes (the device's work is negligible: what is timed is what the host spends queueing it, as in the probe preset).

Prints, for the graph executor's optimisation on and off and a row count fixed or varying between calls: the fused
expert MLP's forward and backward (grouped_mlp.pt, with and without biases), the composed grouped path (two
grouped_mm.pt calls and GELU, libtorch's backward), the permutation (pair_combine.pt, from the map and from the top-k
indices) and the routing
(topk_routing.pt); then single ops the archives are made of (nonzero_static, a stable argsort, index ops, a scatter,
segment_reduce, ...).

Usage (repository root, on a GPU host): python3 scripts/gpu/moe-host-bench.py
(MOE_HOST_BENCH_DEVICE=cpu runs it on the CPU, to check the script.)
"""
import collections
import os
import time

import torch

ROOT = "moe/src/main/resources/io/mcore4j/moe/"
DEV = os.environ.get("MOE_HOST_BENCH_DEVICE", "cuda")  # "cpu": a smoke test of the script itself
BF16 = torch.bfloat16


def sync():
    if DEV == "cuda":
        torch.cuda.synchronize()


def archives():
    mlp = torch.jit.load(ROOT + "grouped_mlp.pt", map_location=DEV)
    gmm = torch.jit.load(ROOT + "grouped_mm.pt", map_location=DEV)
    pair = torch.jit.load(ROOT + "pair_combine.pt", map_location=DEV)
    route = torch.jit.load(ROOT + "topk_routing.pt", map_location=DEV)
    experts, hidden, ffn, tokens = 4, 64, 256, 256
    w1 = torch.randn(experts, ffn, hidden, device=DEV, dtype=BF16)
    w2 = torch.randn(experts, hidden, ffn, device=DEV, dtype=BF16)
    b1 = torch.randn(experts, ffn, device=DEV, dtype=BF16)
    b2 = torch.randn(experts, hidden, device=DEV, dtype=BF16)
    none = torch.empty(0, device=DEV, dtype=BF16)
    logits = torch.randn(tokens, 8, device=DEV, dtype=BF16)
    route_options = torch.tensor([2, 0, 0, 1, 0, 0], dtype=torch.float64)
    no_bias = torch.zeros(0, device=DEV)
    top_indices = torch.randn(tokens, 8, device=DEV).topk(2, 1).indices
    routing_map = torch.zeros(tokens, 8, device=DEV).scatter(1, top_indices, 1.0)
    x_tokens = torch.randn(tokens, hidden, device=DEV, dtype=BF16)
    for optimize in (True, False):
        torch._C._set_graph_executor_optimize(optimize)
        for vary in (False, True):
            for bias in (False, True):
                options = torch.tensor([0, int(bias), int(bias), 1])
                sums = collections.Counter()
                calls = 200
                for i in range(calls + 30):
                    counts = [64 + ((i * 7 + e * 3) % 5) * 8 if vary else 80 for e in range(experts)]
                    rows = sum(counts)
                    x = torch.randn(rows, hidden, device=DEV, dtype=BF16)
                    dy = torch.randn(rows, hidden, device=DEV, dtype=BF16)
                    ends = torch.tensor(counts, device=DEV).cumsum(0).int()
                    host = torch.tensor(counts)
                    sync()
                    t0 = time.perf_counter()
                    y, pre, act = mlp(x, w1, b1 if bias else none, w2, b2 if bias else none, ends, host, options)
                    t1 = time.perf_counter()
                    mlp.backward(dy, x, pre, act, w1, w2, ends, host, options)
                    t2 = time.perf_counter()
                    xs, w1s, w2s = x.requires_grad_(), w1.detach().requires_grad_(), w2.detach().requires_grad_()
                    t3 = time.perf_counter()
                    out = gmm(torch.nn.functional.gelu(gmm(xs, w1s, ends)), w2s, ends)
                    torch.autograd.backward([out], [dy])
                    t4 = time.perf_counter()
                    pair(x_tokens, routing_map, torch.tensor(tokens * 2))
                    t5 = time.perf_counter()
                    route(logits, no_bias, route_options)
                    t6 = time.perf_counter()
                    pair.permute_pairs(x_tokens, top_indices, routing_map)
                    t7 = time.perf_counter()
                    sync()
                    if i >= 30:
                        sums["fused MLP forward"] += t1 - t0
                        sums["fused MLP backward"] += t2 - t1
                        sums["composed MLP, forward and backward (no bias)"] += t4 - t3
                        sums["permutation (pair_combine forward)"] += t5 - t4
                        sums["routing"] += t6 - t5
                        sums["permutation from the top-k indices (pair_combine permute_pairs)"] += t7 - t6
                line = ", ".join(f"{k} {1e6 * v / calls:.0f}" for k, v in sums.items())
                rows_said = "varying" if vary else "fixed"
                print(f"optimise {optimize}, rows {rows_said}, biases {bias}: {line} (us per call)")
    torch._C._set_graph_executor_optimize(True)


def ops():
    tokens, experts, k = 256, 8, 2
    pairs = tokens * k
    routing_map = torch.zeros(tokens, experts, device=DEV).scatter(
        1, torch.randn(tokens, experts, device=DEV).topk(k, 1).indices, 1.0)
    x = torch.randn(tokens, 64, device=DEV, dtype=BF16)
    rows = torch.randn(pairs, 256, device=DEV, dtype=BF16)
    ends = torch.tensor([pairs // 4 * (i + 1) for i in range(4)], device=DEV, dtype=torch.int32)
    token_of_row = torch.randint(0, tokens, (pairs,), device=DEV)
    lengths = torch.diff(ends.long(), prepend=torch.zeros(1, dtype=torch.int64, device=DEV))
    cases = [
        ("nonzero_static(map.t() != 0)", lambda: torch.nonzero_static(routing_map.t() != 0, size=pairs)),
        ("nonzero_static(map != 0)", lambda: torch.nonzero_static(routing_map != 0, size=pairs)),
        ("argsort, stable", lambda: torch.argsort(token_of_row, stable=True)),
        ("index_select", lambda: x.index_select(0, token_of_row)),
        ("index_copy_", lambda: torch.empty_like(token_of_row).index_copy_(0, token_of_row, token_of_row)),
        ("arange", lambda: torch.arange(pairs, device=DEV)),
        ("cumsum [T, E]", lambda: routing_map.cumsum(0)),
        ("searchsorted", lambda: torch.searchsorted(ends, torch.arange(pairs, device=DEV, dtype=torch.int32),
                                                    right=True)),
        ("segment_reduce", lambda: torch.segment_reduce(rows.float(), "sum", lengths=lengths, axis=0, unsafe=True)),
        ("grouped sum against ones", lambda: torch._grouped_mm(rows.t(), torch.ones(pairs, 8, device=DEV, dtype=BF16),
                                                               offs=ends)),
        ("add", lambda: rows + rows),
        ("gelu", lambda: torch.nn.functional.gelu(rows)),
        ("topk", lambda: torch.topk(routing_map, k, dim=1)),
        ("zeros, top-k and scatter", lambda: torch.zeros(tokens, experts, device=DEV).scatter(
            1, torch.topk(routing_map, k, 1).indices, 1.0)),
        ("empty", lambda: torch.empty(pairs, 256, device=DEV, dtype=BF16)),
    ]
    for name, fn in cases:
        for _ in range(20):
            fn()
        sync()
        start = time.perf_counter()
        for _ in range(300):
            fn()
        elapsed = time.perf_counter() - start
        sync()
        print(f"op {name}: {1e6 * elapsed / 300:.1f} us per call (host)")


def main():
    print("torch", torch.__version__, torch.cuda.get_device_name() if DEV == "cuda" else DEV)
    archives()
    ops()


if __name__ == "__main__":
    main()
