"""Writes the TorchScript archive of mcore4j's FP8 linear (core's Fp8Kernels): per-tensor scaled casts to
float8 and the three GEMMs of a linear layer, y = x.W^T (+ b), dx = dy.W, dW = dy^T.x, on float8 operands.

The module is mcore4j's own, written from the semantics of Transformer Engine's per-tensor recipes:
- a cast multiplies by the scale in float32, saturates to the format's largest finite value (e4m3 448,
  e5m2 57344) and rounds to nearest even: q = fp8(clamp(float(x) * scale, -max, max)); a NaN stays NaN.
  The cast writes through copy_ into a float8 buffer, so that a graph fuser never sees a float8 cast.
- delayed scaling: the cast uses the scale of the tensor's slot and records max|x| into the slot's current
  amax (history[0, slot], a running maximum over the step's casts); `update` turns the histories into the
  next step's scales (see update's comment). Tensorwise (current) scaling: the cast takes its scale from
  this tensor's own amax, scale = max / amax (1 where amax is 0 or not finite), and records nothing.
- every GEMM multiplies two float8 operands, accumulates in float32 (the forward's _scaled_mm with fast
  accumulation, as Transformer Engine's forward GEMM), multiplies by the two inverse scales and rounds to the output
  dtype: torch._scaled_mm where the device has it (first operand
  row-major, second column-major, dims multiples of 16), else the reference: the same product of the
  operands widened to float32 (exact), times the inverse scales, rounded to the output dtype.

The methods: `quantize` (the reference cast of one operand: its float8 copy, the copy's row-major transpose and the
inverse scale), `empty_fp8` (float8 buffers for a cast written by a kernel of mcore4j's: its fused CUDA cast, which
equals `quantize` bit for bit), `forward` and `backward` (the GEMMs on pre-cast operands), `update`, `dequantize` and
`widen` (exact float32 of a float8 tensor, for checks).

The scales live in two [slots, 4] float32 buffers (scale, scale_inv), slot i's value at [i, 0]: every slot's
0-dim view starts on a 16-byte boundary, which cuBLASLt needs of _scaled_mm's scale pointers (a view at 4*i bytes
fails with CUBLAS_STATUS_NOT_SUPPORTED). The amax history is [history_len, slots].

Integer arguments come in a CPU int64 tensor `cfg`, read with tolist() (no device wait):
  cfg = [slot, fmt, current, use_scaled_mm, out_dtype]  (fmt 0: e4m3, 1: e5m2; out_dtype: a ScalarType code)

Usage: python3 scripts/make_fp8_linear_module.py core/src/main/resources/io/mcore4j/core/torchscript/fp8_linear.pt
"""
import sys
from typing import List, Tuple

import torch

from torchscript_archive import write_checked

E4M3_MAX = 448.0
E5M2_MAX = 57344.0
# floats per slot in the scale buffers: 16 bytes, the alignment cuBLASLt needs of a scale pointer
SCALE_STRIDE = 4


def _fp8_max(fmt: int) -> float:
    if fmt == 1:
        return 57344.0
    return 448.0


def _cast(x: torch.Tensor, scale: torch.Tensor, fmt: int) -> torch.Tensor:
    m = _fp8_max(fmt)
    y = torch.clamp(x.float() * scale, -m, m)
    out = torch.empty(y.shape, dtype=torch.float8_e5m2 if fmt == 1 else torch.float8_e4m3fn, device=y.device)
    out.copy_(y)
    return out


def _amax(x: torch.Tensor) -> torch.Tensor:
    return torch.linalg.vector_norm(x, float("inf")).float()


def _quantize(x: torch.Tensor, scale: torch.Tensor, scale_inv: torch.Tensor, history: torch.Tensor,
              slot: int, fmt: int, current: bool) -> Tuple[torch.Tensor, torch.Tensor]:
    """The float8 copy of x and its inverse scale (a 0-dim float32 tensor on x's device)."""
    amax = _amax(x)
    if current:
        # a true float32 division (a Python number over a tensor would be amax.reciprocal() * max)
        s = torch.full_like(amax, _fp8_max(fmt)) / amax
        s = torch.where((amax > 0.0) & torch.isfinite(amax), s, torch.ones_like(s))
        s = torch.where(torch.isinf(s), torch.full_like(s, 3.4028234663852886e38), s)
        return _cast(x, s, fmt), s.reciprocal()
    history[0, slot] = torch.maximum(history[0, slot], amax)
    return _cast(x, scale[slot, 0], fmt), scale_inv[slot, 0]


def _gemm(a: torch.Tensor, b: torch.Tensor, a_inv: torch.Tensor, b_inv: torch.Tensor, scaled_mm: bool,
          out_dtype: int, fast_accum: bool = False) -> torch.Tensor:
    """a [m, k] row-major times b [k, n] column-major, both float8, to out_dtype; fast_accum: _scaled_mm's
    use_fast_accum (the tensor cores' accumulator is promoted to float32 less often)."""
    if scaled_mm:
        return torch._scaled_mm(a, b, scale_a=a_inv, scale_b=b_inv, out_dtype=out_dtype, use_fast_accum=fast_accum)
    return (torch.mm(a.float(), b.float()) * (a_inv * b_inv)).to(out_dtype)


class Fp8Linear(torch.nn.Module):
    """The GEMMs take float8 operands cast by `quantize` (the reference) or by a kernel of mcore4j's (its fused CUDA
    cast, which writes into buffers from `empty_fp8`)."""

    def forward(self, qx: torch.Tensor, qw: torch.Tensor, x_inv: torch.Tensor, w_inv: torch.Tensor,
                bias: torch.Tensor, cfg: torch.Tensor) -> torch.Tensor:
        """y = x.W^T (+ bias when it has elements) for the e4m3 x [m, k] and W [n, k]; with _scaled_mm and a bias of
        the output dtype (float16 or bfloat16) the GEMM's epilogue adds the bias. _scaled_mm accumulates fast here
        and precisely in backward, as Transformer Engine's GEMMs do (its split accumulator is off for the forward
        GEMM, on for dgrad and wgrad)."""
        c: List[int] = cfg.tolist()
        if bias.numel() > 0 and c[3] != 0 and c[4] in (5, 15) and bias.dtype == (torch.half if c[4] == 5 else torch.bfloat16):
            # cuBLASLt adds the bias in its epilogue (in float32, before the one rounding to the output dtype) instead
            # of a second pass over y
            return torch._scaled_mm(qx, qw.t(), scale_a=x_inv, scale_b=w_inv, bias=bias, out_dtype=c[4],
                                    use_fast_accum=True)
        y = _gemm(qx, qw.t(), x_inv, w_inv, c[3] != 0, c[4], True)
        if bias.numel() > 0:
            y = y + bias
        return y

    @torch.jit.export
    def quantize(self, x: torch.Tensor, scale: torch.Tensor, scale_inv: torch.Tensor, history: torch.Tensor,
                 cfg: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The reference cast of x [m, n] in slot cfg[0]'s way: its float8 copy [m, n], the copy's transpose [n, m]
        (row-major: the layout the other GEMM takes) and the inverse scale."""
        c: List[int] = cfg.tolist()
        q, inv = _quantize(x, scale, scale_inv, history, c[0], c[1], c[2] != 0)
        return q, q.t().contiguous(), inv

    @torch.jit.export
    def empty_fp8(self, x: torch.Tensor, cfg: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """Uninitialised float8 tensors of format cfg[1] for x [m, n]'s cast: [m, n] and [n, m] on x's device."""
        c: List[int] = cfg.tolist()
        dtype = torch.float8_e5m2 if c[1] == 1 else torch.float8_e4m3fn
        m, n = x.size(0), x.size(1)
        return torch.empty([m, n], dtype=dtype, device=x.device), torch.empty([n, m], dtype=dtype, device=x.device)

    @torch.jit.export
    def backward(self, qdy: torch.Tensor, qdy_t: torch.Tensor, dy_inv: torch.Tensor, qx_t: torch.Tensor,
                 x_inv: torch.Tensor, qw_t: torch.Tensor, w_inv: torch.Tensor,
                 cfg: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """dx = dy.W [m, k] and dW = dy^T.x [n, k] (out_dtype) from the float8 dy [m, n] and dy^T [n, m] (format
        cfg[1]) and the e4m3 x^T [k, m] and W^T [k, n], each row-major."""
        c: List[int] = cfg.tolist()
        dx = _gemm(qdy, qw_t.t(), dy_inv, w_inv, c[3] != 0, c[4])
        dw = _gemm(qdy_t, qx_t.t(), dy_inv, x_inv, c[3] != 0, c[4])
        return dx, dw

    @torch.jit.export
    def dequantize(self, q: torch.Tensor, inv: torch.Tensor) -> torch.Tensor:
        """float32(q) * inv, for tests and checks."""
        return q.float() * inv

    @torch.jit.export
    def widen(self, q: torch.Tensor) -> torch.Tensor:
        """float32(q), exact (a NaN keeps its sign), for checks that compare float8 tensors bit for bit."""
        return q.float()

    @torch.jit.export
    def update(self, history: torch.Tensor, scale: torch.Tensor, scale_inv: torch.Tensor,
               fp8_max: torch.Tensor, current_amax: torch.Tensor, cfg: torch.Tensor) -> torch.Tensor:
        """Delayed scaling's step, in place: the current amax row (reduced over ranks by the caller) is written
        to history[0]; the amax is the history's maximum (algo 1; NaN wins) or its current row (algo 0); the
        history rolls by one (history[0] leaves for the end, the oldest entry is dropped) and its current row
        becomes 0; scale[:, 0] = fp8_max / amax / 2^margin where amax > 0 and finite (else unchanged), the largest
        float32 where that is infinite; scale_inv[:, 0] = 1 / scale[:, 0]. cfg = [margin, algo]."""
        c: List[int] = cfg.tolist()
        history[0].copy_(current_amax)
        if c[1] == 1:
            amax = torch.amax(history, 0)
        else:
            amax = history[0].clone()
        if history.size(0) > 1:
            history.copy_(torch.roll(history, -1, 0))
        history[0].zero_()
        sf = (fp8_max / amax) / float(2 ** c[0])
        previous = scale[:, 0]
        sf = torch.where(amax > 0.0, sf, previous)
        sf = torch.where(torch.isfinite(amax), sf, previous)
        sf = torch.where(torch.isinf(sf), torch.full_like(sf, 3.4028234663852886e38), sf)
        scale[:, 0].copy_(sf)
        scale_inv[:, 0].copy_(sf.reciprocal())
        return scale


def _buffer(values: List[float]) -> torch.Tensor:
    """A [slots, SCALE_STRIDE] scale buffer holding values in column 0 and ones elsewhere."""
    b = torch.ones(len(values), SCALE_STRIDE)
    b[:, 0] = torch.tensor(values)
    return b


def check(module: torch.jit.ScriptModule) -> None:
    """Against the definitions (module and reference GEMM; _scaled_mm where this torch has it)."""
    torch.manual_seed(0)
    x = torch.randn(32, 48, dtype=torch.bfloat16)
    w = torch.randn(16, 48, dtype=torch.bfloat16) * 0.05
    n = 3
    history = torch.zeros(2, n)
    scale = _buffer([8.0, 4096.0, 1.0])
    scale_inv = scale.reciprocal()
    qw, qw_t, w_inv = module.quantize(w, scale, scale_inv, history, torch.tensor([1, 0, 0, 0, 15]))
    want_qw = torch.clamp(w.float() * 4096.0, -448.0, 448.0).to(torch.float8_e4m3fn)
    if qw.dtype != torch.float8_e4m3fn or not torch.equal(qw.view(torch.uint8), want_qw.view(torch.uint8)) \
            or not torch.equal(qw_t.view(torch.uint8), want_qw.view(torch.uint8).t()) or not qw_t.is_contiguous():
        raise SystemExit("weight cast differs")
    if history[0, 1].item() != w.float().abs().max().item():
        raise SystemExit("weight amax not recorded")
    fwd = torch.tensor([0, 0, 0, 0, 15])
    qx, qx_t, x_inv = module.quantize(x, scale, scale_inv, history, fwd)
    y = module(qx, qw, x_inv, w_inv, torch.empty(0), fwd)
    want_y = (qx.float() @ qw.float().t() / 8.0 / 4096.0).to(torch.bfloat16)
    if not torch.equal(y, want_y):
        raise SystemExit("forward differs")
    dy = torch.randn(32, 16, dtype=torch.bfloat16)
    bwd = torch.tensor([2, 1, 1, 0, 15])
    qdy, qdy_t, dy_inv = module.quantize(dy, scale, scale_inv, history, bwd)
    dx, dw = module.backward(qdy, qdy_t, dy_inv, qx_t, x_inv, qw_t, w_inv, bwd)
    amax = dy.float().abs().max()
    s_dy = torch.tensor(E5M2_MAX) / amax
    want_qdy = torch.clamp(dy.float() * s_dy, -E5M2_MAX, E5M2_MAX).to(torch.float8_e5m2)
    if not torch.equal(qdy.view(torch.uint8), want_qdy.view(torch.uint8)) or dy_inv.item() != (1 / s_dy).item():
        raise SystemExit("tensorwise cast differs")
    inv = 1 / s_dy
    qdy = want_qdy.float()
    qxf = qx.float()
    if not torch.allclose(dx.float(), (qdy @ qw.float() * inv / 4096.0).to(torch.bfloat16).float(), rtol=1e-2, atol=1e-3):
        raise SystemExit("input gradient differs")
    if not torch.allclose(dw.float(), (qdy.t() @ qxf * inv / 8.0).to(torch.bfloat16).float(), rtol=1e-2, atol=1e-3):
        raise SystemExit("weight gradient differs")
    if not torch.equal(module.dequantize(qdy_t, dy_inv), want_qdy.float().t() * dy_inv):
        raise SystemExit("dequantize differs")
    if not torch.equal(module.widen(qdy_t), want_qdy.float().t()):
        raise SystemExit("widen differs")
    special = torch.tensor([[float("nan"), -float("nan"), float("inf"), -float("inf"), 500.0, -1e30, 1e-30, 0.0]] * 16)
    for fmt, dtype in ((0, torch.float8_e4m3fn), (1, torch.float8_e5m2)):
        h = torch.zeros(1, 1)
        q, _, _ = module.quantize(special, _buffer([1.0]), _buffer([1.0]), h, torch.tensor([0, fmt, 0, 0, 15]))
        m = _fp8_max(fmt)
        want = torch.clamp(special, -m, m).to(dtype).view(torch.uint8)
        if not torch.equal(q.view(torch.uint8), want) or not torch.isnan(h[0, 0]):
            raise SystemExit(f"saturation or NaN differs for format {fmt}: {q[0].tolist()} vs {want[0].tolist()}")
        e, e_t = module.empty_fp8(special, torch.tensor([0, fmt, 0, 0, 15]))
        if e.dtype != dtype or e.shape != special.shape or e_t.shape != special.t().shape:
            raise SystemExit(f"empty_fp8 gave {e.dtype} {e.shape}, {e_t.shape}")
    try:
        y2 = module(qx, qw, x_inv, w_inv, torch.empty(0), torch.tensor([0, 0, 0, 1, 15]))
        if not torch.allclose(y2.float(), y.float(), rtol=1e-2, atol=1e-2):
            raise SystemExit("_scaled_mm differs from the reference GEMM")
        b = torch.randn(16, dtype=torch.bfloat16)
        y3 = module(qx, qw, x_inv, w_inv, b, torch.tensor([0, 0, 0, 1, 15]))
        if not torch.allclose(y3.float(), (y.float() + b.float()), rtol=1e-2, atol=1e-2):
            raise SystemExit("_scaled_mm's bias epilogue differs from the reference GEMM plus the bias")
    except RuntimeError as e:
        print(f"(_scaled_mm not checked on this device: {str(e).splitlines()[0]})")
    h = torch.tensor([[3.0, 0.0, float("nan")], [5.0, 1.0, 2.0]])
    s = _buffer([1.0, 1.0, 1.0])
    si = _buffer([1.0, 1.0, 1.0])
    module.update(h, s, si, torch.tensor([448.0, 448.0, 57344.0]), torch.tensor([2.0, 0.0, 4.0]), torch.tensor([1, 1]))
    if not torch.equal(s, _buffer([448.0 / 5.0 / 2.0, 448.0 / 1.0 / 2.0, 57344.0 / 4.0 / 2.0])):
        raise SystemExit(f"update gave {s}")
    if not torch.equal(h, torch.tensor([[0.0, 0.0, 0.0], [2.0, 0.0, 4.0]])):
        raise SystemExit(f"update left history {h}")


def main(path: str) -> None:
    write_checked(Fp8Linear(), check, path)


if __name__ == "__main__":
    main(sys.argv[1])
