"""Writes the TorchScript archives through which mcore4j runs the local experts' whole MLP (fc1, bias, activation,
fc2, bias) as one call forward and one call backward (moe's GroupedExpertMlp, an autograd Function of the rows and
the stacked weights and biases), where the composed grouped path makes two grouped products of their own, a split,
an add and a concatenation per bias, and the activation, and libtorch's autograd runs their backward node by node.

- grouped_mlp.pt: the grouped products are libtorch's _grouped_mm (libtorch 2.8 and later: the GPU hosts); an older
  libtorch fails to load it, and the composed path runs;
- grouped_mlp_loop.pt: the same methods with one matmul per expert, on any libtorch (the CPU tests run the Function
  through it).

Methods (rows [N, h] come expert by expert; ends [E] int32 on the rows' device: the running sums of the rows per
expert; counts the same as a host int64 tensor, read by the loop only; options a host int64 tensor [activation,
fc1 bias, fc2 bias, input gradient], activation 0 GELU (erf), 1 tanh GELU, 2 SwiGLU, 3 tanh GeGLU, fc1 = [gate; up]
for the gated two):

- forward(x [N, h], w1 [E, f1, h], b1 [E, f1] or empty, w2 [E, h, f], b2 [E, h] or empty, ends, counts, options)
  -> (y [N, h], pre [N, f1], act [N, f]): pre = x_e w1[e]^T + b1[e] for each expert's rows, act = act(pre),
  y = act_e w2[e]^T + b2[e] (pre and act are what libtorch's autograd would keep for backward);
  the products as grouped_mm.pt makes them, each bias added to its expert's rows;
- backward(dy [N, h], x, pre, act, w1, w2, ends, counts, options) -> (dx [N, h] or empty, dw1 [E, f1, h], db1
  [E, f1] or empty, dw2 [E, h, f], db2 [E, h] or empty): libtorch's own derivative ops
  (gelu_backward, silu_backward), each weight's gradient one grouped product of the gradient and the input over each
  expert's rows, each bias's the sum over its rows (one grouped product against columns of ones: float32 sums, no
  atomics).

No method synchronises with the device: the rows per expert stay on the device for the kernel (the check on a GPU,
scripts/gpu/moe-modules-check.py, runs them under torch.cuda.set_sync_debug_mode("error")).

Usage: python3 scripts/make_grouped_mlp_modules.py moe/src/main/resources/io/mcore4j/moe
(with a torch >= 2.8; the checks below run on the CPU.)
"""
import os
import sys
from typing import List, Tuple

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torchscript_archive import write_checked  # noqa: E402

# the activation codes (literals in the scripted functions, which read no globals)
GELU, GELU_TANH, SWIGLU, GEGLU_TANH = 0, 1, 2, 3


def activate(pre: torch.Tensor, activation: int) -> torch.Tensor:
    if activation == 0:
        return F.gelu(pre)
    if activation == 1:
        return F.gelu(pre, approximate="tanh")
    gate, up = pre.chunk(2, -1)
    if activation == 2:
        return F.silu(gate) * up
    return F.gelu(gate, approximate="tanh") * up


def activation_backward(grad: torch.Tensor, pre: torch.Tensor, activation: int) -> torch.Tensor:
    """the gradient of the activation's input"""
    if activation == 0:
        return torch.ops.aten.gelu_backward(grad, pre)
    if activation == 1:
        return torch.ops.aten.gelu_backward(grad, pre, approximate="tanh")
    gate, up = pre.chunk(2, -1)
    if activation == 2:
        gated = F.silu(gate)
        d_gate = torch.ops.aten.silu_backward(grad * up, gate)
    else:
        gated = F.gelu(gate, approximate="tanh")
        d_gate = torch.ops.aten.gelu_backward(grad * up, gate, approximate="tanh")
    return torch.cat([d_gate, grad * gated], -1)


class GroupedMlpKernel(torch.nn.Module):
    """The MLP on libtorch's grouped kernel."""

    def product(self, rows: torch.Tensor, weights: torch.Tensor, ends: torch.Tensor,
                counts: List[int]) -> torch.Tensor:
        """rows_e weights[e]^T: [N, k] x [E, n, k] -> [N, n] (as grouped_mm.pt)"""
        return torch._grouped_mm(rows, weights.transpose(1, 2), offs=ends)

    def product_t(self, rows: torch.Tensor, weights: torch.Tensor, ends: torch.Tensor,
                  counts: List[int]) -> torch.Tensor:
        """rows_e weights[e]: [N, n] x [E, n, k] -> [N, k]"""
        return torch._grouped_mm(rows, weights, offs=ends)

    def wgrad(self, grad: torch.Tensor, rows: torch.Tensor, ends: torch.Tensor, counts: List[int]) -> torch.Tensor:
        """grad_e^T rows_e: [N, n], [N, k] -> [E, n, k], contiguous: the weights' layout, so that libtorch's
        accumulation into each expert's .grad takes the first micro-batch's slice as it is and adds the next ones with
        vectorised kernels (a transposed view cost a strided copy, then a strided add, per expert and micro-batch)"""
        return torch._grouped_mm(grad.t(), rows, offs=ends)

    def group_sum(self, rows: torch.Tensor, ends: torch.Tensor, counts: List[int]) -> torch.Tensor:
        """each expert's rows summed: [N, n] -> [E, n], as the weight gradient's grouped product against columns of
        ones (float32 sums; eight columns, the 16 bytes the kernel reads a row in; a single row of ones as the other
        operand trips the bfloat16 kernel on a GPU)"""
        ones = torch.ones([rows.size(0), 8], dtype=rows.dtype, device=rows.device)
        return torch._grouped_mm(rows.t(), ones, offs=ends).select(2, 0)

    def expert_of_rows(self, ends: torch.Tensor, counts: List[int], rows: int) -> torch.Tensor:
        return torch.searchsorted(ends, torch.arange(rows, dtype=ends.dtype, device=ends.device), right=True)

    def forward(self, x: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor, b2: torch.Tensor,
                ends: torch.Tensor, counts_host: torch.Tensor,
                options: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        o: List[int] = options.tolist()
        counts: List[int] = counts_host.tolist()
        pre = self.product(x, w1, ends, counts)
        expert = self.expert_of_rows(ends, counts, x.size(0)) if o[1] != 0 or o[2] != 0 else ends
        if o[1] != 0:
            pre = pre + b1.index_select(0, expert)
        act = activate(pre, o[0])
        y = self.product(act, w2, ends, counts)
        if o[2] != 0:
            y = y + b2.index_select(0, expert)
        return y, pre, act

    @torch.jit.export
    def backward(self, dy: torch.Tensor, x: torch.Tensor, pre: torch.Tensor, act: torch.Tensor, w1: torch.Tensor,
                 w2: torch.Tensor, ends: torch.Tensor, counts_host: torch.Tensor, options: torch.Tensor) \
            -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        o: List[int] = options.tolist()
        counts: List[int] = counts_host.tolist()
        none = torch.empty([0], dtype=x.dtype, device=x.device)
        d_act = self.product_t(dy, w2, ends, counts)
        d_pre = activation_backward(d_act, pre, o[0])
        dw2 = self.wgrad(dy, act, ends, counts)
        db2 = self.group_sum(dy, ends, counts) if o[2] != 0 else none
        dw1 = self.wgrad(d_pre, x, ends, counts)
        db1 = self.group_sum(d_pre, ends, counts) if o[1] != 0 else none
        dx = self.product_t(d_pre, w1, ends, counts) if o[3] != 0 else none
        return dx, dw1, db1, dw2, db2


class GroupedMlpLoop(GroupedMlpKernel):
    """The same MLP with one matmul per expert (any libtorch)."""

    def product(self, rows: torch.Tensor, weights: torch.Tensor, ends: torch.Tensor,
                counts: List[int]) -> torch.Tensor:
        parts = rows.split(counts)
        return torch.cat([parts[e] @ weights[e].t() for e in range(len(counts))])

    def product_t(self, rows: torch.Tensor, weights: torch.Tensor, ends: torch.Tensor,
                  counts: List[int]) -> torch.Tensor:
        parts = rows.split(counts)
        return torch.cat([parts[e] @ weights[e] for e in range(len(counts))])

    def wgrad(self, grad: torch.Tensor, rows: torch.Tensor, ends: torch.Tensor, counts: List[int]) -> torch.Tensor:
        g = grad.split(counts)
        r = rows.split(counts)
        return torch.stack([g[e].t() @ r[e] for e in range(len(counts))])

    def group_sum(self, rows: torch.Tensor, ends: torch.Tensor, counts: List[int]) -> torch.Tensor:
        parts = rows.split(counts)
        return torch.stack([parts[e].sum(0, dtype=torch.promote_types(rows.dtype, torch.float32)) for e in range(len(counts))]).to(rows.dtype)

    def expert_of_rows(self, ends: torch.Tensor, counts: List[int], rows: int) -> torch.Tensor:
        return torch.arange(len(counts), device=ends.device).repeat_interleave(
            torch.tensor(counts, dtype=torch.int64, device=ends.device), output_size=rows)


def composed(x, w1, b1, w2, b2, counts, activation):
    """The definition: each expert's MLP on its rows."""
    out = []
    for e, part in enumerate(x.split(counts)):
        pre = part @ w1[e].t() + (b1[e] if b1 is not None else 0)
        y = activate(pre, activation) @ w2[e].t() + (b2[e] if b2 is not None else 0)
        out.append(y)
    return torch.cat(out)


def check(module: torch.jit.ScriptModule, dtype: torch.dtype = torch.float64, device: str = "cpu") -> None:
    """forward and backward against the definition's values and autograd gradients, experts with no rows first,
    inside and last, every activation, with and without biases."""
    torch.manual_seed(0)
    hidden, ffn = 16, 8
    tol = {torch.float64: 1e-10, torch.float32: 1e-5}.get(dtype, 3e-2)
    for counts in ([0, 3, 0, 5], [4, 4, 4, 4], [0, 0, 0, 7], [2, 0, 0, 0]):
        for activation in (GELU, GELU_TANH, SWIGLU, GEGLU_TANH):
            for bias in (False, True):
                f1 = ffn * (2 if activation in (SWIGLU, GEGLU_TANH) else 1)
                experts, rows = len(counts), sum(counts)
                x = torch.randn(rows, hidden, dtype=torch.float64).to(dtype).to(device).requires_grad_()
                w1 = (torch.randn(experts, f1, hidden, dtype=torch.float64) / 4).to(dtype).to(device).requires_grad_()
                w2 = (torch.randn(experts, hidden, ffn, dtype=torch.float64) / 4).to(dtype).to(device).requires_grad_()
                b1 = torch.randn(experts, f1, dtype=torch.float64).to(dtype).to(device).requires_grad_() if bias else None
                b2 = torch.randn(experts, hidden, dtype=torch.float64).to(dtype).to(device).requires_grad_() if bias else None
                upstream = torch.randn(rows, hidden, dtype=torch.float64).to(dtype).to(device)
                want = composed(x, w1, b1, w2, b2, counts, activation)
                leaves = [t for t in (x, w1, b1, w2, b2) if t is not None]
                grads = dict(zip(("x", "w1", "b1", "w2", "b2") if bias else ("x", "w1", "w2"),
                                 torch.autograd.grad(want, leaves, upstream)))
                ends = torch.tensor(counts).cumsum(0).to(torch.int32).to(device)
                host = torch.tensor(counts, dtype=torch.int64)
                options = torch.tensor([activation, int(bias), int(bias), 1], dtype=torch.int64)
                empty = torch.empty(0, dtype=dtype, device=device)
                with torch.no_grad():
                    y, pre, act = module(x, w1, b1 if bias else empty, w2, b2 if bias else empty, ends, host, options)
                    dx, dw1, db1, dw2, db2 = module.backward(upstream, x, pre, act, w1, w2, ends, host, options)
                got = {"y": y, "x": dx, "w1": dw1, "w2": dw2}
                if bias:
                    got.update(b1=db1, b2=db2)
                wanted = dict(grads, y=want)
                for name, value in got.items():
                    ref = wanted[name]
                    scale = max(ref.abs().max().item(), 1.0)
                    if value.shape != ref.shape or (value - ref).abs().max().item() > tol * scale:
                        raise SystemExit(f"grouped MLP {name} differs from the definition: counts {counts}, "
                                         f"activation {activation}, bias {bias}, {dtype}")
                    if name in ("w1", "w2") and not value.is_contiguous():
                        raise SystemExit(f"grouped MLP: the gradient of {name} is not in the weights' layout (strides "
                                         f"{value.stride()}), so libtorch's accumulation would copy it per expert")


def main(folder: str) -> None:
    # libtorch's grouped kernel takes float32 and half precisions
    write_checked(GroupedMlpKernel(), lambda m: check(m, torch.float32), os.path.join(folder, "grouped_mlp.pt"))
    write_checked(GroupedMlpLoop(), check, os.path.join(folder, "grouped_mlp_loop.pt"))


if __name__ == "__main__":
    main(sys.argv[1])
