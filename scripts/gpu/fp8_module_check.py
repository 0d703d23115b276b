"""FP8 module check on one GPU (issue 35): loads mcore4j's committed fp8_linear.pt (the module core's Fp8Linear runs)
and, on CUDA,
1. runs forward (with a bias: _scaled_mm's epilogue adds it) and backward with torch._scaled_mm and with the float32
   reference GEMM on the same float8 operands and prints their largest relative difference (expected below 1e-2: accumulation order and bf16 rounding);
2. times, at M = N = K = SIZE (8192) in bf16, the module's reference cast (`quantize`: x with its delayed scale,
   amax, transposed copy), the forward GEMM on pre-cast operands (`forward`: _scaled_mm with the cached float8
   weight), the backward GEMMs (`backward`: dgrad and wgrad on the pre-cast e5m2 dy and dy^T), and bf16 torch.mm /
   the two bf16 backward GEMMs for comparison, with TorchScript's graph optimisation off (how mcore4j runs it) and
   on. On the GPU mcore4j casts with its fused kernel instead of `quantize` (io.mcore4j.samples.bench.Fp8CastCheck
   compares the two and times both), so the GEMM figures are what an FP8 linear multiplies at.
Prints one line per figure. Usage: python3 scripts/gpu/fp8_module_check.py [core/src/main/resources/.../fp8_linear.pt]
"""
import os
import sys
import time

import torch

here = os.path.dirname(os.path.abspath(__file__))
path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "../../core/src/main/resources/io/mcore4j/core/torchscript/fp8_linear.pt")
size = int(os.environ.get("SIZE", "8192"))
dev = os.environ.get("DEVICE", "cuda")
module = torch.jit.load(path, map_location=dev)
print(f"torch {torch.__version__}, {torch.cuda.get_device_name() if dev == 'cuda' else dev}, module {path}")


STRIDE = 4  # floats per slot in the scale buffers (Fp8Scaling.SCALE_STRIDE): 16-byte aligned scale pointers
LINEAR = 1  # the checks use the second linear's slots (3, 4, 5): scale views at non-zero offsets, as in a model


def state(n=6):
    return torch.zeros(1, n, device=dev), torch.ones(n, STRIDE, device=dev), torch.ones(n, STRIDE, device=dev)


def cfg(role, e5m2, scaled_mm):
    return torch.tensor([3 * LINEAR + role, int(e5m2), 0, int(scaled_mm), 15])


def run(scaled_mm, x, w, dy):
    history, scale, scale_inv = state()
    first = 3 * LINEAR
    scale[first:first + 3, 0] = torch.tensor([448.0 / 4, 448.0 / w.abs().max().item(), 57344.0 / dy.abs().max().item()])
    scale_inv.copy_(scale.reciprocal())
    qw, qw_t, w_inv = module.quantize(w, scale, scale_inv, history, cfg(1, False, scaled_mm))
    qx, qx_t, x_inv = module.quantize(x, scale, scale_inv, history, cfg(0, False, scaled_mm))
    y = module(qx, qw, x_inv, w_inv, bias, cfg(0, False, scaled_mm))  # _scaled_mm adds the bias in its epilogue
    qdy, qdy_t, dy_inv = module.quantize(dy, scale, scale_inv, history, cfg(2, True, scaled_mm))
    dx, dw = module.backward(qdy, qdy_t, dy_inv, qx_t, x_inv, qw_t, w_inv, cfg(2, True, scaled_mm))
    offsets = [t.storage_offset() * 4 for t in (x_inv, w_inv)]
    if min(offsets) == 0 or any(o % 16 for o in offsets):
        raise SystemExit(f"the check meant scale views at non-zero 16-byte aligned offsets, got byte offsets {offsets}")
    return y, dx, dw


def rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


torch.manual_seed(0)
x = torch.randn(512, 1024, device=dev, dtype=torch.bfloat16)
w = torch.randn(768, 1024, device=dev, dtype=torch.bfloat16) * 0.02
dy = torch.randn(512, 768, device=dev, dtype=torch.bfloat16) * 1e-3
bias = torch.randn(768, device=dev, dtype=torch.bfloat16) * 0.1
fast, ref = run(True, x, w, dy), run(False, x, w, dy)
worst = max(rel(a, b) for a, b in zip(fast, ref))
print(f"check _scaled_mm vs float32 reference on the same float8 operands (slots {3 * LINEAR}..{3 * LINEAR + 2}, scale"
      f" views at byte offsets {48 * LINEAR}..{48 * LINEAR + 32}): worst relative difference {worst:.2e}"
      f" ({'OK' if worst < 1e-2 else 'FAIL'})")
exact = x.float() @ w.float().t() + bias.float()
print(f"check FP8 forward vs float32 linear: relative error {rel(fast[0], exact):.3f} (expected ~0.03)")


def timed(fn, iters=20):
    for _ in range(3):
        fn()
    if dev == "cuda":
        torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(iters):
        fn()
    if dev == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - t) / iters


flop = 2.0 * size ** 3
X = torch.randn(size, size, device=dev, dtype=torch.bfloat16)
W = torch.randn(size, size, device=dev, dtype=torch.bfloat16) * 0.02
DY = torch.randn(size, size, device=dev, dtype=torch.bfloat16) * 1e-3
bf16 = timed(lambda: torch.mm(X, W.t()))
bf16_bwd = timed(lambda: (torch.mm(DY, W), torch.mm(DY.t(), X)))
print(f"bf16 torch.mm {size}^3: {flop / bf16 / 1e12:.0f} TFLOP/s; bf16 dgrad+wgrad {2 * flop / bf16_bwd / 1e12:.0f} TFLOP/s")
for optimize in (False, True):
    torch._C._set_graph_executor_optimize(optimize)
    try:
        history, scale, scale_inv = state()
        qw, qw_t, w_inv = module.quantize(W, scale, scale_inv, history, cfg(1, False, True))
        empty = torch.empty(0, device=dev)
        cast = timed(lambda: module.quantize(X, scale, scale_inv, history, cfg(0, False, True)))
        QX, QX_T, x_inv = module.quantize(X, scale, scale_inv, history, cfg(0, False, True))
        QDY, QDY_T, dy_inv = module.quantize(DY, scale, scale_inv, history, cfg(2, True, True))
        fwd = timed(lambda: module(QX, qw, x_inv, w_inv, empty, cfg(0, False, True)))
        bwd = timed(lambda: module.backward(QDY, QDY_T, dy_inv, QX_T, x_inv, qw_t, w_inv, cfg(2, True, True)))
        print(f"graph optimisation {'on ' if optimize else 'off'}: fp8 forward GEMM {flop / fwd / 1e12:.0f} TFLOP/s"
              f" ({bf16 / fwd:.2f}x bf16); fp8 backward GEMMs {2 * flop / bwd / 1e12:.0f} TFLOP/s ({bf16_bwd / bwd:.2f}x"
              f" bf16); reference cast of x (amax, scale, float8 copy and its transpose) {cast * 1e3:.2f} ms")
    except Exception as e:  # the fuser's float8 failure is what this line reports
        print(f"graph optimisation {'on ' if optimize else 'off'}: FAILED {str(e).splitlines()[0][:200]}")
torch._C._set_graph_executor_optimize(True)
