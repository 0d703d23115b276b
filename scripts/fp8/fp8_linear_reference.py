"""Writes core's FP8 linear fixture for mcore4j's Fp8LinearTest: a linear y = x.W^T + b in bf16 run for two steps
with per-tensor FP8 scaling, computed here from the recipe's semantics with plain torch ops (not mcore4j's module).

Per tensor: q = float8(clamp(float32(x) * scale, -max, max)) (round to nearest even, saturating; e4m3 max 448,
e5m2 max 57344); a GEMM multiplies the float8 operands exactly in float32, multiplies by the two inverse scales
and rounds to bf16. Forward: y = (x_q . W_q^T) + b. Backward: dy cast to e5m2 (hybrid), dx = dy_q . W_q,
dW = dy_q^T . x_q, db = sum(dy) (in bf16).
- delayed (history 1, most_recent, margin 0): step 1 uses scale 1 everywhere and records the amaxes
  (x, W, dy); the update sets scale = max / amax; step 2 (new x and dy, same W) uses those scales.
- tensorwise: every cast uses max / amax of the tensor itself.
Values are bf16 numbers, written as decimal floats (exact in float32).

Usage: python3 scripts/fp8/fp8_linear_reference.py core/src/test/resources/io/mcore4j/core/fp8/fp8_linear.json
"""
import json
import sys

import torch

E4M3, E5M2 = 448.0, 57344.0


def cast(x, scale, fp8_max, dtype):
    return torch.clamp(x.float() * scale, -fp8_max, fp8_max).to(dtype)


def gemm(a, b, inv_a, inv_b):
    return ((a.float().double() @ b.float().double()) * (inv_a * inv_b)).float().to(torch.bfloat16)


def step(x, w, b, dy, scales):
    """scales: (x, w, dy) float32 scales, or None for tensorwise. Returns outputs and the amaxes."""
    amax = [t.float().abs().max() for t in (x, w, dy)]
    if scales is None:
        scales = [torch.tensor(m) / a for m, a in zip((E4M3, E4M3, E5M2), amax)]
    sx, sw, sg = scales
    x2, dy2 = x.reshape(-1, x.shape[-1]), dy.reshape(-1, dy.shape[-1])
    qx, qw, qg = cast(x2, sx, E4M3, torch.float8_e4m3fn), cast(w, sw, E4M3, torch.float8_e4m3fn), \
        cast(dy2, sg, E5M2, torch.float8_e5m2)
    ix, iw, ig = 1 / sx, 1 / sw, 1 / sg
    y = (gemm(qx, qw.t(), ix, iw) + b).reshape(*x.shape[:-1], w.shape[0])
    dx = gemm(qg, qw, ig, iw).reshape(x.shape)
    dw = gemm(qg.t(), qx, ig, ix)
    db = dy2.sum(0)
    return {"y": y, "dx": dx, "dw": dw, "db": db}, amax


def flat(t):
    return [float(v) for v in t.float().reshape(-1).tolist()]


def main(path):
    g = torch.Generator().manual_seed(35)
    s, bsz, k, n = 16, 1, 32, 48
    w = (torch.randn(n, k, generator=g) * 0.05).to(torch.bfloat16)
    b = (torch.randn(n, generator=g) * 0.1).to(torch.bfloat16)
    xs = [(torch.randn(s, bsz, k, generator=g) * (1 + 3 * i)).to(torch.bfloat16) for i in range(2)]
    dys = [(torch.randn(s, bsz, n, generator=g) * 1e-3).to(torch.bfloat16) for _ in range(2)]
    steps = []
    scales = [torch.tensor(1.0)] * 3
    for i in range(2):
        out, amax = step(xs[i], w, b, dys[i], scales)
        steps.append({"x": flat(xs[i]), "dy": flat(dys[i]), "scales": [float(v) for v in scales],
                      "amax": [float(a) for a in amax], **{key: flat(v) for key, v in out.items()}})
        scales = [torch.tensor(m, dtype=torch.float32) / a for m, a in zip((E4M3, E4M3, E5M2), amax)]
    tensorwise, _ = step(xs[1], w, b, dys[1], None)
    with open(path, "w") as f:
        json.dump({"shape": [s, bsz, k, n], "w": flat(w), "b": flat(b), "delayed": steps,
                   "tensorwise": {key: flat(v) for key, v in tensorwise.items()}}, f)
        f.write("\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main(sys.argv[1])
