"""Summarises a trace written by cupti_trace.cpp (gzipped or not) over the last N training steps.

Steps are delimited by the fused Adam kernel (libtorch's or mcore4j's adam_*), which runs at the end of each
optimizer step. Prints: wall time per step; kernel time per category and per kernel name; compute
time (every kernel but NCCL's) and time with any kernel running, both as unions over streams, so
that "any - compute" is communication that nothing overlapped; idle gaps; long host calls (waits).
With --sequence PATTERN K, prints instead the kernels around the K-th kernel whose name contains
PATTERN in the first summarised step (e.g. one layer's forward around `sdpa_sm90_flash_fprop`).
With --kernels PATTERN..., also prints the count and time per step of the kernels whose full name
contains each PATTERN (e.g. `FillFunctor` for zero fills, `Functor_add` for adds). With --durations PATTERN, also
lists the duration of each such kernel of the last step in order (e.g. `enable_3x_kernel_for_sm9x`, the grouped
GEMMs of the MoE layers, whose durations show how many rows each layer's local experts received).

With --gaps N, also lists the N longest idle gaps (no kernel on any stream) and the kernels around each.
With --gap-histogram, also sorts every idle gap by length into bins (count and time per step each) and lists the
kernel pairs around the gaps of 2 to 200 us that cost the most, marking pairs on two streams.

Usage: python3 scripts/profile/summarize.py TRACE [--steps 3] [--kernels PATTERN...] [--durations PATTERN] [--gaps N]
       [--gap-histogram] [--sequence PATTERN K [--before 30 --count 80]]
"""
import argparse
import collections
import gzip
import re


def read(path):
    kernels, calls = [], []
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        for line in f:
            kind, start, end, where, _corr, name = line.rstrip("\n").split(" ", 5)
            (calls if kind == "A" else kernels).append((int(start), int(end), int(where), name))
    kernels.sort()
    calls.sort()
    return kernels, calls


def step_ends(kernels):
    ends, last = [], None
    for s, e, _, n in kernels:
        if "fused_adam" not in n and not n.startswith("adam_"):
            continue
        if last is None or s - last > 20e6:
            ends.append(e)
        else:
            ends[-1] = e
        last = e
    return ends


def category(name):
    n = name.lower()
    for key, cat in [("nccl", "nccl"), ("nvjet", "gemm"), ("gemm", "gemm"), ("cutlass", "gemm"), ("sdpa", "attention"),
                     ("cudnn", "attention"), ("layer_norm", "layernorm"), ("fused_adam", "adam"),
                     ("memset", "memset"), ("fill", "fill"), ("cublas", "cublas-small"), ("reduce_kernel", "reduce"),
                     ("copy", "copy")]:
        if key in n:
            return cat
    if re.match(r"kind\d+_", name):
        return "memcpy"
    return "elementwise/other"


def union(intervals):
    total, cur = 0, None
    for s, e in sorted(intervals):
        if cur is None or s > cur[1]:
            if cur:
                total += cur[1] - cur[0]
            cur = [s, e]
        else:
            cur[1] = max(cur[1], e)
    return total + (cur[1] - cur[0] if cur else 0)


def short(name):
    m = re.search(r"(nccl\w+|nvjet\w+|sdpa\w{0,30}|layer_norm\w{0,60}|Functor_?\w{0,30}|\w{0,30}_kernel_cuda|reduce_kernel"
                  r"|memset_\d+|kind\d+_\d+)", name)
    kind = "vec " if "vectorized" in name else "gen " if "elementwise_kernelILi128" in name else ""
    return kind + (m.group(0) if m else name[:80])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("trace")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--sequence", nargs=2, metavar=("PATTERN", "K"))
    p.add_argument("--before", type=int, default=30)
    p.add_argument("--count", type=int, default=80)
    p.add_argument("--top", type=int, default=20, help="how many of the longest kernels to list (default 20)")
    p.add_argument("--kernels", nargs="+", default=[], metavar="PATTERN")
    p.add_argument("--durations", metavar="PATTERN",
                   help="also list, in order, the duration (us) of every kernel of the last step whose name contains it")
    p.add_argument("--gaps", type=int, default=0, metavar="N", help="also list the N longest idle gaps")
    p.add_argument("--gap-histogram", action="store_true", help="also bin the idle gaps and name their kernels")
    a = p.parse_args()
    kernels, calls = read(a.trace)
    ends = step_ends(kernels)
    if len(ends) < a.steps + 1:
        raise SystemExit(f"{len(ends)} optimizer steps in the trace; need {a.steps + 1}")
    w0, w1 = ends[-a.steps - 1], ends[-1]
    window = [k for k in kernels if k[0] >= w0 and k[1] <= w1]
    per = 1e6 * a.steps
    if a.sequence:
        pattern, nth = a.sequence[0], int(a.sequence[1])
        hits = [i for i, k in enumerate(kernels) if k[0] >= w0 and pattern in k[3]]
        if len(hits) < nth:
            raise SystemExit(f"{len(hits)} kernels match {pattern}")
        i = hits[nth - 1]
        base = kernels[i][0]
        for s, e, stream, n in kernels[max(0, i - a.before):i - a.before + a.count]:
            print(f"{(s - base) / 1e3:10.1f} us {(e - s) / 1e3:8.1f} us  stream {stream:<4} {short(n)}")
        return
    print(f"wall {(w1 - w0) / per:.1f} ms per step over the last {a.steps} steps")
    cats = collections.defaultdict(lambda: [0, 0])
    names = collections.defaultdict(lambda: [0, 0])
    for s, e, _, n in window:
        cats[category(n)][0] += e - s
        cats[category(n)][1] += 1
        names[short(n)][0] += e - s
        names[short(n)][1] += 1
    for c, (t, k) in sorted(cats.items(), key=lambda x: -x[1][0]):
        print(f"  {c:18s} {t / per:8.2f} ms  {k / a.steps:7.0f} kernels")
    compute = union([(s, e) for s, e, _, n in window if category(n) != "nccl"])
    busy = union([(s, e) for s, e, _, _ in window])
    print(f"compute {compute / per:.1f} ms, any kernel {busy / per:.1f} ms (communication nothing overlapped: "
          f"{(busy - compute) / per:.1f} ms), idle {(w1 - w0 - busy) / per:.1f} ms per step")
    print("top kernels (ms per step, count per step):")
    for n, (t, k) in sorted(names.items(), key=lambda x: -x[1][0])[:a.top]:
        print(f"  {t / per:7.2f} {k / a.steps:6.0f}  {n}")
    for pattern in a.kernels:
        hits = [e - s for s, e, _, n in window if pattern in n]
        print(f"kernels containing {pattern}: {len(hits) / a.steps:.0f} per step, {sum(hits) / per:.2f} ms per step")
    if a.durations:
        last = [(e - s) / 1e3 for s, e, _, n in sorted(window) if s >= ends[-2] and a.durations in n]
        print(f"kernels containing {a.durations} in the last step, us each in order: "
              + " ".join(f"{d:.0f}" for d in last))
    waits = collections.defaultdict(lambda: [0, 0])
    for s, e, _, n in calls:
        if w0 <= s < w1:
            waits[n][0] += e - s
            waits[n][1] += 1
    # idle gaps: stretches with no kernel on any stream, with the kernels that end and start them
    gaps, end, last = [], None, None
    for k in sorted(window):
        if end is not None and k[0] > end:
            gaps.append((k[0] - end, last, k))
        if end is None or k[1] > end:
            end, last = k[1], k
    if a.gap_histogram:
        bins = [0, 2e3, 5e3, 10e3, 50e3, 200e3, 1e6, float("inf")]
        print("idle gaps by length (count and ms per step):")
        for lo, hi in zip(bins, bins[1:]):
            hit = [g for g, _, _ in gaps if lo <= g < hi]
            print(f"  {lo / 1e3:6.0f} - {hi / 1e3:<6.0f} us  {len(hit) / a.steps:7.0f}  {sum(hit) / per:7.2f} ms")
        pairs = collections.defaultdict(lambda: [0, 0])
        for g, before, after in gaps:
            if 2e3 <= g < 200e3:
                key = (short(before[3]), short(after[3]), before[2] != after[2])
                pairs[key][0] += g
                pairs[key][1] += 1
        print("kernel pairs around gaps of 2-200 us (ms and count per step; * = the two kernels on two streams):")
        for (b, n, two), (t, k) in sorted(pairs.items(), key=lambda x: -x[1][0])[:15]:
            print(f"  {t / per:7.2f} {k / a.steps:6.0f} {'*' if two else ' '} {b} -> {n}")
    if a.gaps:
        print(f"the {a.gaps} longest idle gaps (of {len(gaps)}; us, offset from the window's start in ms):")
        for g, before, after in sorted(gaps, key=lambda x: -x[0])[:a.gaps]:
            print(f"  {g / 1e3:9.1f} us at {(before[1] - w0) / 1e6:8.2f} ms  after {short(before[3])} (stream {before[2]})"
                  f"  before {short(after[3])} (stream {after[2]})")
    print("host calls over 20 us (ms per step, count per step):")
    for n, (t, k) in sorted(waits.items(), key=lambda x: -x[1][0])[:8]:
        print(f"  {t / per:7.2f} {k / a.steps:6.1f}  {n}")


if __name__ == "__main__":
    main()
