"""Writes the TorchScript archives of libtorch ops that models' MlpHalf (a layer's second half with a
hand-written backward) calls and DJL does not expose. No parameters, no state:

- layer_norm_forward.pt: forward(x, weight, bias, eps [0-dim CPU float64]) -> (out, mean, rstd), libtorch's
  native_layer_norm over the last dim (the statistics its backward needs);
- layer_norm_backward.pt: forward(dy, x, mean, rstd, weight, bias) -> (dx, dweight, dbias), libtorch's
  native_layer_norm_backward;
- layer_norm_weight_backward.pt: forward(dy, x, mean, rstd, weight, bias) -> (dweight, dbias), the same backward
  for the affine parameters only (where a kernel of ours writes the input gradient);
- gelu_backward.pt: forward(h, dy) -> (dh, column sums of dh [cols]), the exact GELU's backward and the
  gradient of the bias before it (the composed form of mcore4j's CUDA bias-gradient kernel).

(The weight gradient's accumulation inside the GEMM is core's: scripts/make_accumulate_weight_gradient_module.py.)

Usage: python3 scripts/make_mlp_half_modules.py models/src/main/resources/io/mcore4j/models/torchscript
"""
import os
import sys
from typing import List, Tuple

import torch
from torch import Tensor

from torchscript_archive import write_checked


class LayerNormForward(torch.nn.Module):
    def forward(self, x: Tensor, weight: Tensor, bias: Tensor, eps: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        return torch.native_layer_norm(x, [x.size(-1)], weight, bias, float(eps.item()))


class LayerNormBackward(torch.nn.Module):
    def forward(self, dy: Tensor, x: Tensor, mean: Tensor, rstd: Tensor, weight: Tensor,
                bias: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        dx, dw, db = torch.ops.aten.native_layer_norm_backward(dy, x, [x.size(-1)], mean, rstd, weight, bias,
                                                               [True, True, True])
        assert dx is not None and dw is not None and db is not None
        return dx, dw, db


class LayerNormWeightBackward(torch.nn.Module):
    def forward(self, dy: Tensor, x: Tensor, mean: Tensor, rstd: Tensor, weight: Tensor,
                bias: Tensor) -> Tuple[Tensor, Tensor]:
        _, dw, db = torch.ops.aten.native_layer_norm_backward(dy, x, [x.size(-1)], mean, rstd, weight, bias,
                                                              [False, True, True])
        assert dw is not None and db is not None
        return dw, db


class GeluBackward(torch.nn.Module):
    def forward(self, h: Tensor, dy: Tensor) -> Tuple[Tensor, Tensor]:
        dh = torch.ops.aten.gelu_backward(dy, h)
        return dh, dh.reshape(-1, dh.size(-1)).sum(0, dtype=torch.float32)


def check_forward(m: torch.jit.ScriptModule) -> None:
    x = torch.randn(3, 2, 8)
    w, b = torch.randn(8), torch.randn(8)
    out, mean, rstd = m(x, w, b, torch.tensor(1e-5, dtype=torch.float64))
    if not torch.allclose(out, torch.nn.functional.layer_norm(x, [8], w, b, 1e-5), atol=1e-6):
        raise SystemExit("scripted native_layer_norm differs from layer_norm")


def check_backward(m: torch.jit.ScriptModule) -> None:
    x = torch.randn(3, 2, 8, requires_grad=True)
    w, b = torch.randn(8, requires_grad=True), torch.randn(8, requires_grad=True)
    dy = torch.randn(3, 2, 8)
    torch.nn.functional.layer_norm(x, [8], w, b, 1e-5).backward(dy)
    _, mean, rstd = torch.native_layer_norm(x.detach(), [8], w.detach(), b.detach(), 1e-5)
    dx, dw, db = m(dy, x.detach(), mean, rstd, w.detach(), b.detach())
    if not (torch.allclose(dx, x.grad, atol=1e-5) and torch.allclose(dw, w.grad, atol=1e-5)
            and torch.allclose(db, b.grad, atol=1e-5)):
        raise SystemExit("scripted native_layer_norm_backward differs from autograd")


def check_weight_backward(m: torch.jit.ScriptModule) -> None:
    x = torch.randn(3, 2, 8)
    w, b = torch.randn(8, requires_grad=True), torch.randn(8, requires_grad=True)
    dy = torch.randn(3, 2, 8)
    torch.nn.functional.layer_norm(x, [8], w, b, 1e-5).backward(dy)
    _, mean, rstd = torch.native_layer_norm(x, [8], w.detach(), b.detach(), 1e-5)
    dw, db = m(dy, x, mean, rstd, w.detach(), b.detach())
    if not (torch.allclose(dw, w.grad, atol=1e-5) and torch.allclose(db, b.grad, atol=1e-5)):
        raise SystemExit("scripted native_layer_norm_backward (weights only) differs from autograd")


def check_gelu(m: torch.jit.ScriptModule) -> None:
    h = torch.randn(3, 2, 8, requires_grad=True)
    dy = torch.randn(3, 2, 8)
    torch.nn.functional.gelu(h).backward(dy)
    dh, sums = m(h.detach(), dy)
    if not (torch.equal(dh, h.grad) and torch.allclose(sums, h.grad.reshape(-1, 8).sum(0), atol=1e-6)):
        raise SystemExit("scripted gelu_backward differs from autograd")


def main(directory: str) -> None:
    write_checked(LayerNormForward(), check_forward, os.path.join(directory, "layer_norm_forward.pt"))
    write_checked(LayerNormBackward(), check_backward, os.path.join(directory, "layer_norm_backward.pt"))
    write_checked(LayerNormWeightBackward(), check_weight_backward,
                  os.path.join(directory, "layer_norm_weight_backward.pt"))
    write_checked(GeluBackward(), check_gelu, os.path.join(directory, "gelu_backward.pt"))


if __name__ == "__main__":
    main(sys.argv[1])
