"""Writes the TorchScript archives through which tensor-parallel's overlapped sequence-parallel linears write a
GEMM's product straight into rows of a tensor they hold (libtorch's out= forms, which DJL does not expose). No
parameters, no state:

- mm_into.pt: forward(out [..., n], a [..., k], b [k, n]) -> out, which now holds a.reshape(-1, k) @ b;
- addmm_into.pt: forward(out [..., n], bias [n], a [..., k], b [k, n]) -> out, which now holds bias + a @ b (the
  bias in the GEMM's epilogue, as Tensors.linear's addmm).

`out` is a contiguous tensor or a contiguous view (a range of rows of a larger tensor); its memory is written in
place and nothing else of the larger tensor is touched.

Usage: python3 scripts/make_linear_into_modules.py tensor-parallel/src/main/resources/io/mcore4j/tensorparallel
"""
import os
import sys

import torch
from torch import Tensor

from torchscript_archive import write_checked


class MmInto(torch.nn.Module):
    def forward(self, out: Tensor, a: Tensor, b: Tensor) -> Tensor:
        torch.mm(a.reshape(-1, a.size(-1)), b, out=out.view(-1, out.size(-1)))
        return out


class AddmmInto(torch.nn.Module):
    def forward(self, out: Tensor, bias: Tensor, a: Tensor, b: Tensor) -> Tensor:
        torch.addmm(bias, a.reshape(-1, a.size(-1)), b, out=out.view(-1, out.size(-1)))
        return out


def check_mm(m: torch.jit.ScriptModule) -> None:
    full = torch.zeros(6, 2, 3)
    a, w = torch.randn(2, 2, 4), torch.randn(3, 4)
    m(full[2:4], a, w.t())
    if not torch.allclose(full[2:4], a @ w.t()) or full[:2].abs().sum() != 0 or full[4:].abs().sum() != 0:
        raise SystemExit("mm_into did not write a @ b into exactly the rows it was given")


def check_addmm(m: torch.jit.ScriptModule) -> None:
    full = torch.zeros(6, 2, 3)
    a, w, bias = torch.randn(2, 2, 4), torch.randn(3, 4), torch.randn(3)
    m(full[4:6], bias, a, w.t())
    if not torch.allclose(full[4:6], a @ w.t() + bias) or full[:4].abs().sum() != 0:
        raise SystemExit("addmm_into did not write bias + a @ b into exactly the rows it was given")


def main(directory: str) -> None:
    os.makedirs(directory, exist_ok=True)
    write_checked(MmInto(), check_mm, os.path.join(directory, "mm_into.pt"))
    write_checked(AddmmInto(), check_addmm, os.path.join(directory, "addmm_into.pt"))


if __name__ == "__main__":
    main(sys.argv[1])
