"""Writes the TorchScript archive through which mcore4j reaches bfloat16 tensors (core's DataTypes).

DJL 0.35.1's PyTorch JNI maps no DJL data type to libtorch's bfloat16: asking it to create a
bfloat16 tensor, or to convert one to bfloat16, ends the process. A module of our own does those
steps inside libtorch instead. It has no parameters; each method is one libtorch call:

- forward(x): a detached bfloat16 copy of x (rounded to nearest even), on x's device
- dtype_code(x): x's c10::ScalarType code (15 is bfloat16)
- to_device(x, like): x moved (or copied) to like's device, dtype unchanged

Usage: python3 scripts/make_bfloat16_module.py core/src/main/resources/io/mcore4j/core/torchscript/bfloat16.pt
"""
import sys

import torch
from torch import Tensor


class BFloat16Bridge(torch.nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        return x.detach().to(torch.bfloat16, copy=True)

    @torch.jit.export
    def dtype_code(self, x: Tensor) -> int:
        return x.dtype

    @torch.jit.export
    def to_device(self, x: Tensor, like: Tensor) -> Tensor:
        return x.detach().to(like.device, copy=True)


def check(module: torch.jit.ScriptModule) -> None:
    x = torch.tensor([1.0, -2.5, 0.1, 3.0e38, 1.0e-40])
    b = module(x)
    if b.dtype != torch.bfloat16 or not torch.equal(b, x.to(torch.bfloat16)):
        raise SystemExit(f"the scripted cast gave {b}")
    if module.dtype_code(b) != 15 or module.dtype_code(x) != 6:
        raise SystemExit("the scripted dtype code is wrong")
    if not torch.equal(module.to_device(b, x), b):
        raise SystemExit("the scripted device move changed the values")


def main(path: str) -> None:
    module = torch.jit.script(BFloat16Bridge())
    check(module)
    module.save(path)
    check(torch.jit.load(path))
    print(module.code)
    print(f"wrote {path} with torch {torch.__version__}")


if __name__ == "__main__":
    main(sys.argv[1])
