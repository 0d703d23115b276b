"""Writes the TorchScript archive through which mcore4j adds a linear layer's weight gradient into an existing .grad
inside the GEMM (core's WeightGradients; Megatron's gradient accumulation fusion). No parameters, no state:

- forward(grad [out, in], dy [rows, out], x [rows, in]) -> grad, which it has added dy^T x to in place (one GEMM
  that reads the old gradient, where libtorch's autograd writes the product and adds it in a second pass).

Usage: python3 scripts/make_accumulate_weight_gradient_module.py \
    core/src/main/resources/io/mcore4j/core/torchscript/accumulate_weight_gradient.pt
"""
import sys

import torch
from torch import Tensor

from torchscript_archive import write_checked


class AccumulateWeightGradient(torch.nn.Module):
    def forward(self, grad: Tensor, dy: Tensor, x: Tensor) -> Tensor:
        return grad.addmm_(dy.t(), x)


def check(m: torch.jit.ScriptModule) -> None:
    grad, dy, x = torch.randn(4, 6), torch.randn(5, 4), torch.randn(5, 6)
    expected = grad + dy.t() @ x
    same = m(grad, dy, x)
    if not (torch.allclose(grad, expected, atol=1e-5) and same.data_ptr() == grad.data_ptr()):
        raise SystemExit("scripted addmm_ did not add dy^T x into grad in place")


def main(path: str) -> None:
    write_checked(AccumulateWeightGradient(), check, path)


if __name__ == "__main__":
    main(sys.argv[1])
