"""Checks mcore4j's MoE TorchScript archives on a CUDA device with the host's torch (the GPU hosts' 2.11; the
archives are written by torch 2.13): grouped_mm.pt against one matmul per expert, forward and gradients, with
experts of no rows, in bfloat16 and float32; permute_tokens.pt and unpermute_tokens.pt against their per-pair
definition; pair_combine.pt against the index-add's definition (scripts/make_pair_combine_module.py's check, on the
device); topk_routing.pt against eager routing (logits and expert bias on the device, options on the host),
choice, probabilities, load-balancing scores and map, gradient, in bfloat16 and float32; then one timing line of the grouped product against the padded batched matmul (mcore4j's fallback)
and the per-expert loop, for a Mixtral-like expert layer, and one of the combine's ways (index-add against gathers) at the
fine-grained benchmark row's shape; grouped_mlp.pt against its definition (no synchronisation in its calls) and its
time against the composed grouped path.

Usage (repository root): python3 scripts/gpu/moe-modules-check.py
"""
import importlib.util
import time

import torch

ROOT = "moe/src/main/resources/io/mcore4j/moe/"


def per_expert(rows, weights, counts):
    return torch.cat([part @ weights[e].t() for e, part in enumerate(rows.split(counts))])


def padded(rows, weights, counts):
    longest = max(counts)
    slots = []
    offset = 0
    for c in counts:
        slots.append(torch.cat([torch.arange(offset, offset + c), torch.full((longest - c,), rows.size(0))]))
        offset += c
    index = torch.cat(slots).to(rows.device)
    x = torch.cat([rows, rows.new_zeros(1, rows.size(1))]).index_select(0, index).view(len(counts), longest, -1)
    y = torch.bmm(x, weights.transpose(1, 2)).reshape(len(counts) * longest, -1)
    kept = torch.cat([e * longest + torch.arange(c) for e, c in enumerate(counts)]).to(rows.device)
    return y.index_select(0, kept)


def check_grouped(module):
    for dtype, tolerance in ((torch.bfloat16, 3e-2), (torch.float32, 1e-4)):
        for counts in ([0, 96, 0, 160, 32, 0, 16, 0], [64] * 8, [0] * 7 + [48]):
            rows = torch.randn(sum(counts), 256, device="cuda", dtype=dtype, requires_grad=True)
            weights = (torch.randn(8, 128, 256, device="cuda", dtype=dtype) / 16).requires_grad_()
            ends = torch.tensor(counts, device="cuda").cumsum(0).to(torch.int32)
            upstream = torch.randn(sum(counts), 128, device="cuda", dtype=dtype)
            got = module(rows, weights, ends)
            g = torch.autograd.grad(got, (rows, weights), upstream)
            want = per_expert(rows, weights, counts)
            w = torch.autograd.grad(want, (rows, weights), upstream)
            for name, a, b in (("output", got, want), ("rows' gradient", g[0], w[0]), ("weights' gradient", g[1], w[1])):
                error = ((a - b).abs().max() / b.abs().max().clamp_min(1e-6)).item()
                status = "ok" if error < tolerance else "FAILED"
                print(f"grouped_mm {dtype} counts {counts}: {name} relative error {error:.2e} {status}")


def check_permutation(permute, unpermute):
    torch.manual_seed(0)
    tokens, experts, hidden = 64, 8, 32
    scores = torch.rand(tokens, experts, device="cuda")
    routing_map = torch.zeros(tokens, experts, device="cuda").scatter(1, scores.topk(2, dim=1).indices, 1.0)
    kept_map = routing_map * (torch.rand(tokens, experts, device="cuda") > 0.2)
    probs = (scores * routing_map).requires_grad_()
    x = torch.randn(tokens, hidden, device="cuda", requires_grad=True)
    pairs = torch.tensor(int(routing_map.sum().item()), dtype=torch.int64)  # on the host, as mcore4j passes it
    rows, token_of_row, expert_of_row = permute(x, routing_map, pairs)
    out = unpermute(rows * 2, token_of_row, expert_of_row, kept_map, probs)
    want = 2 * x * (probs * kept_map).sum(1, keepdim=True)
    error = (out - want).abs().max().item()
    order = torch.nonzero(routing_map.t())[:, 1]
    print(f"token permutation: output error {error:.2e}, order {'ok' if torch.equal(order, token_of_row) else 'FAILED'}")


def eager_routing(logits, bias, k, sigmoid, pre_softmax, scaling):
    """TopKRouting's composed path in eager torch."""
    key = lambda s: s.detach().float() + bias if bias is not None else s
    if sigmoid:
        scores = torch.sigmoid(logits.float())
        indices = torch.topk(key(scores), k, dim=1).indices
        chosen = scores.gather(1, indices)
        probs = chosen / (chosen.sum(1, keepdim=True) + 1e-20) if k > 1 else chosen
    elif pre_softmax:
        scores = torch.softmax(logits.float(), -1)
        indices = torch.topk(key(scores), k, dim=1).indices
        probs = scores.gather(1, indices)
    else:
        indices = torch.topk(key(logits), k, dim=1).indices
        probs = torch.softmax(logits.gather(1, indices).float(), -1)
    probs = (probs * scaling).to(logits.dtype)
    return indices, torch.zeros_like(logits).scatter(1, indices, probs)


def check_routing(module):
    torch.manual_seed(2)
    for dtype in (torch.bfloat16, torch.float32):
        for sigmoid, pre_softmax, k, with_bias, scaling in ((False, False, 2, False, 1.0), (False, True, 1, True, 2.5),
                                                            (True, False, 3, True, 1.0), (True, False, 1, False, 2.5)):
            values = (torch.randn(256, 8, device="cuda") * 4).round() / 4
            bias = torch.randn(8, device="cuda") * 0.5 if with_bias else None
            options = torch.tensor([k, sigmoid, pre_softmax, scaling, with_bias, 1], dtype=torch.float64)
            x = values.to(dtype).requires_grad_()
            y = values.to(dtype).requires_grad_()
            # the third call: TorchScript's profiling executor optimises (and may fuse) the graph after its first runs
            for _ in range(3):
                indices, _, probs, routing_map, aux_scores, aux_map = module(
                    x, bias if bias is not None else torch.zeros(0), options)
            s = torch.sigmoid(y.detach().float())
            want_aux = s / (s.sum(1, keepdim=True) + 1e-20) if sigmoid else torch.softmax(y.detach().float(), -1)
            want_aux_map = torch.zeros(256, 8, device="cuda").scatter(1, want_aux.topk(k, dim=1).indices, 1.0)
            want_indices, want_probs = eager_routing(y, bias, k, sigmoid, pre_softmax, scaling)
            upstream = torch.randn(256, 8, device="cuda", dtype=dtype)
            g, = torch.autograd.grad(probs, x, upstream)
            w, = torch.autograd.grad(want_probs, y, upstream)
            same = torch.equal(indices, want_indices) and torch.equal(probs, want_probs) \
                and torch.equal(routing_map, torch.zeros(256, 8, device="cuda").scatter(1, want_indices, 1.0)) \
                and torch.equal(aux_scores.detach(), want_aux) and torch.equal(aux_map, want_aux_map)
            error = ((g - w).abs().max() / w.abs().max().clamp_min(1e-6)).item()
            status = "ok" if same and error < 1e-5 else "FAILED"
            print(f"topk_routing {dtype} sigmoid={sigmoid} pre_softmax={pre_softmax} top-{k} bias={with_bias}"
                  f" scaling {scaling}: choice and probabilities {'equal' if same else 'DIFFER'}, gradient relative"
                  f" error {error:.1e} {status}")


def timed(fn, *args):
    for _ in range(3):
        fn(*args)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(10):
        fn(*args)
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / 10 * 1e3


def bench(module):
    torch.manual_seed(1)
    experts, hidden, ffn, tokens = 8, 4096, 14336, 8192  # Mixtral's expert fc1 (one of gate/up), top-2 of 4096 tokens
    counts = torch.distributions.Multinomial(tokens, torch.ones(experts)).sample().long().tolist()
    rows = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16)
    weights = torch.randn(experts, ffn, hidden, device="cuda", dtype=torch.bfloat16) / 64
    ends = torch.tensor(counts, device="cuda").cumsum(0).to(torch.int32)
    flops = 2.0 * tokens * hidden * ffn
    for name, fn, args in (("torch._grouped_mm", module, (rows, weights, ends)),
                           ("padded bmm", padded, (rows, weights, counts)),
                           ("per-expert loop", per_expert, (rows, weights, counts))):
        ms = timed(fn, *args)
        print(f"bench {name}: {ms:.3f} ms, {flops / ms / 1e9:.0f} TFLOP/s (bf16, {experts} experts, counts {counts})")


def pair_combine_check():
    """The archive's own check (scripts/make_pair_combine_module.py), run on CUDA."""
    spec = importlib.util.spec_from_file_location("make_pair_combine_module", "scripts/make_pair_combine_module.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    module = torch.jit.load(ROOT + "pair_combine.pt", map_location="cuda")
    try:
        script.check(module, "cuda")
        print("pair_combine: combine, its gradients and sum_rows equal the index-add's definition: ok")
    except SystemExit as e:
        print(f"pair_combine: FAILED: {e}")
    return module


def grouped_mlp_check(grouped):
    """grouped_mlp.pt (scripts/make_grouped_mlp_modules.py's check, on the device, float32 and bfloat16), with no
    synchronisation in its calls; then forward and backward against the composed grouped path at the fine-grained
    row's expert shape (16 local experts of 64, h 2048, ffn 2048, GELU, 65536 rows)."""
    spec = importlib.util.spec_from_file_location("make_grouped_mlp_modules", "scripts/make_grouped_mlp_modules.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    module = torch.jit.load(ROOT + "grouped_mlp.pt", map_location="cuda")
    for dtype in (torch.float32, torch.bfloat16):
        try:
            script.check(module, dtype, "cuda")
            print(f"grouped_mlp {dtype}: forward and backward equal the per-expert definition: ok")
        except SystemExit as e:
            print(f"grouped_mlp {dtype}: FAILED: {e}")
    torch.manual_seed(4)
    experts, hidden, ffn, rows = 16, 2048, 2048, 65536
    counts = torch.distributions.Multinomial(rows, torch.ones(experts)).sample().long().tolist()
    counts[3] = 0
    counts[0] += rows - sum(counts)
    x = torch.randn(rows, hidden, device="cuda", dtype=torch.bfloat16)
    w1 = torch.randn(experts, ffn, hidden, device="cuda", dtype=torch.bfloat16) / 64
    w2 = torch.randn(experts, hidden, ffn, device="cuda", dtype=torch.bfloat16) / 64
    b1 = torch.randn(experts, ffn, device="cuda", dtype=torch.bfloat16)
    b2 = torch.randn(experts, hidden, device="cuda", dtype=torch.bfloat16)
    ends = torch.tensor(counts, device="cuda").cumsum(0).to(torch.int32)
    host = torch.tensor(counts, dtype=torch.int64)
    upstream = torch.randn(rows, hidden, device="cuda", dtype=torch.bfloat16)
    for bias in (False, True):
        options = torch.tensor([0, int(bias), int(bias), 1], dtype=torch.int64)
        none = torch.empty(0, device="cuda", dtype=torch.bfloat16)

        def fused():
            with torch.no_grad():
                y, pre, act = module(x, w1, b1 if bias else none, w2, b2 if bias else none, ends, host, options)
                module.backward(upstream, x, pre, act, w1, w2, ends, host, options)
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            fused()
            print(f"grouped_mlp bias={bias}: forward and backward without a synchronisation: ok")
        except RuntimeError as e:
            print(f"grouped_mlp bias={bias}: FAILED: a call synchronises ({e})")
        finally:
            torch.cuda.set_sync_debug_mode("default")
        xs, w1s, w2s = (t.clone().requires_grad_() for t in (x, w1, w2))
        b1s, b2s = (t.clone().requires_grad_() for t in (b1, b2))

        def composed():
            h = grouped(xs, w1s, ends)
            if bias:
                h = torch.cat([p + b1s[e] for e, p in enumerate(h.split(counts))])
            y = grouped(torch.nn.functional.gelu(h), w2s, ends)
            if bias:
                y = torch.cat([p + b2s[e] for e, p in enumerate(y.split(counts))])
            torch.autograd.grad(y, (xs, w1s, w2s) + ((b1s, b2s) if bias else ()), upstream)
        got, want = timed(fused), timed(composed)
        print(f"bench expert MLP bias={bias}: fused {got:.3f} ms, composed {want:.3f} ms (forward and backward, "
              f"{experts} experts, h {hidden}, ffn {ffn}, {rows} rows, bf16)")


def bench_combine(permute, unpermute, pairs):
    """Forward and backward of the combine, the index-add's way and by gathers: 8192 tokens, top-8 of 64, h 2048."""
    torch.manual_seed(3)
    tokens, experts, k, hidden = 8192, 64, 8, 2048
    scores = torch.rand(tokens, experts, device="cuda")
    routing_map = torch.zeros(tokens, experts, device="cuda").scatter(1, scores.topk(k, dim=1).indices, 1.0)
    probs = (scores * routing_map).requires_grad_()
    x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16)
    count = torch.tensor(tokens * k, dtype=torch.int64)
    rows, token_of_row, expert_of_row = permute(x, routing_map, count)
    rows = rows.detach().requires_grad_()
    upstream = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16)
    _, _, _, row_of_pair, pair_of_row, expert_of_pair = pairs(x, routing_map, count)

    def index_add():
        out = unpermute(rows, token_of_row, expert_of_row, routing_map, probs)
        torch.autograd.grad(out, (rows, probs), upstream)
        unpermute(rows, token_of_row, expert_of_row, routing_map, routing_map)  # the permutation's transpose

    def gathers():
        with torch.no_grad():
            pairs.combine(rows, row_of_pair, expert_of_pair, probs)
            pairs.combine_backward(rows, token_of_row, row_of_pair, pair_of_row, expert_of_pair, probs, upstream)
            pairs.sum_rows(rows, row_of_pair)
    for name, fn in (("index-add", index_add), ("gathers", gathers)):
        print(f"bench combine by {name}: {timed(fn):.3f} ms (forward, backward and the dispatch's transpose,"
              f" {tokens} tokens top-{k} of {experts}, h {hidden}, bf16)")


def main():
    print("torch", torch.__version__, torch.cuda.get_device_name())
    grouped = torch.jit.load(ROOT + "grouped_mm.pt", map_location="cuda")
    check_grouped(grouped)
    check_permutation(torch.jit.load(ROOT + "permute_tokens.pt", map_location="cuda"),
                      torch.jit.load(ROOT + "unpermute_tokens.pt", map_location="cuda"))
    pairs = pair_combine_check()
    check_routing(torch.jit.load(ROOT + "topk_routing.pt", map_location="cuda"))
    bench(grouped)
    grouped_mlp_check(grouped)
    bench_combine(torch.jit.load(ROOT + "permute_tokens.pt", map_location="cuda"),
                  torch.jit.load(ROOT + "unpermute_tokens.pt", map_location="cuda"), pairs)


if __name__ == "__main__":
    main()
