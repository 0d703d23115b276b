"""Writes core's delayed-scaling fixture: Transformer Engine's per-tensor delayed scaling, step by step, in plain
Python from the recipe's semantics (no torch, no Transformer Engine), for mcore4j's Fp8ScalingTest.

The recipe (TE's DelayedScaling, as its documentation and pytorch/fp8.py describe it):
- each FP8 tensor has an amax history of `amax_history_len` float32 entries and a float32 scale, initially
  zeros and 1; a cast in step k uses the scale computed at the end of step k-1 and records max|x| into the
  history's current entry, history[0];
- at the end of a step: amax = max(history) for "max" (a NaN anywhere makes it NaN), history[0] for
  "most_recent"; then the history rolls by one towards the front (history[i] = history[i+1], the current
  entry moves to the end, the oldest entry, history[1], is dropped) and history[0] = 0;
- scale = (fp8_max / amax) / 2^margin, kept unchanged where amax == 0 or amax is not finite, and the largest
  float32 where the quotient overflows to infinity; every step of the arithmetic rounds to float32.

The fixture: for each configuration, the amaxes observed per step and slot (slots 0 and 1 e4m3, fp8_max 448;
slot 2 e5m2, 57344), and the scales and histories expected after each step's update. Numbers are written
as Java-readable strings (hex floats, "NaN", "Infinity") so that JSON carries NaN and infinities exactly.

Usage: python3 scripts/fp8/delayed_scaling_reference.py core/src/test/resources/io/mcore4j/core/fp8/delayed_scaling.json
"""
import json
import math
import random
import struct
import sys

FP8_MAX = [448.0, 448.0, 57344.0]
FP32_MAX = struct.unpack("f", struct.pack("I", 0x7F7FFFFF))[0]


def f32(x: float) -> float:
    """Rounds to the nearest float32 (overflow to infinity)."""
    if math.isnan(x) or math.isinf(x):
        return x
    if abs(x) >= 2.0 ** 128 * (1 - 2.0 ** -25):
        return math.copysign(math.inf, x)
    return struct.unpack("f", struct.pack("f", x))[0]


def div32(a: float, b: float) -> float:
    if b == 0.0:
        return math.copysign(math.inf, a) if a != 0.0 else math.nan
    if math.isinf(b):
        return 0.0 if not math.isinf(a) else math.nan
    return f32(a / b)


def nan_max(values):
    if any(math.isnan(v) for v in values):
        return math.nan
    return max(values)


def simulate(steps, length, algo, margin):
    n = len(FP8_MAX)
    history = [[0.0] * n for _ in range(length)]
    scale = [1.0] * n
    out = []
    for amaxes in steps:
        history[0] = list(amaxes)
        new_scale = []
        for s in range(n):
            column = [history[i][s] for i in range(length)]
            amax = nan_max(column) if algo == "max" else column[0]
            sf = div32(div32(FP8_MAX[s], amax), f32(2.0 ** margin))
            if not amax > 0.0:
                sf = scale[s]
            if math.isnan(amax) or math.isinf(amax):
                sf = scale[s]
            if math.isinf(sf):
                sf = FP32_MAX
            new_scale.append(sf)
        if length > 1:
            history = history[1:] + [history[0]]
        history[0] = [0.0] * n
        scale = new_scale
        out.append({"scale": [enc(v) for v in scale], "history": [[enc(v) for v in row] for row in history]})
    return out


def enc(x: float) -> str:
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return float.hex(x)


def observations(rng, count):
    specials = [0.0, math.inf, math.nan, 1e-40, 3.0e38, 1.0]
    steps = []
    for k in range(count):
        row = []
        for s in range(3):
            if rng.random() < 0.15:
                row.append(f32(rng.choice(specials)))
            else:
                row.append(f32(math.exp(rng.uniform(-12.0, 8.0))))
        steps.append(row)
    return steps


def main(path):
    rng = random.Random(35)
    cases = []
    for length, algo, margin in [(1, "most_recent", 0), (1, "max", 0), (4, "max", 0), (4, "most_recent", 2),
                                 (16, "max", 1), (3, "max", 0)]:
        steps = observations(rng, 24)
        cases.append({"amax_history_len": length, "amax_compute_algo": algo, "margin": margin,
                      "amax": [[enc(v) for v in row] for row in steps],
                      "expected": simulate(steps, length, algo, margin)})
    with open(path, "w") as f:
        json.dump({"fp8_max": FP8_MAX, "cases": cases}, f)
        f.write("\n")
    print(f"wrote {path}: {len(cases)} cases")


if __name__ == "__main__":
    main(sys.argv[1])
