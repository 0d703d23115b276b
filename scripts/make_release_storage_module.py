"""Writes the TorchScript archive through which mcore4j frees a gradient that autograd would keep too long.

A Function's output is a leaf of the libtorch graph; backward accumulates its gradient into the leaf's
.grad, and the leaf lives (held by the retained graph) until its autograd scope closes, so the gradient
does too, although the Function's backward consumed it long before. DJL cannot unset a .grad, and
TorchScript cannot assign one; this module of ours empties the tensors it is given instead
(Tensor.set_(): zero elements, no storage), which returns their memory to the allocator at once. It has
no parameters and no state:

- forward(tensors): empties every tensor of the list in place; returns how many

Usage: python3 scripts/make_release_storage_module.py core/src/main/resources/io/mcore4j/core/torchscript/release_storage.pt
"""
import sys
from typing import List

import torch

from torchscript_archive import write_checked


class ReleaseStorage(torch.nn.Module):
    # The list is a graph input on purpose: set_ mutates its tensors, and TorchScript drops a call whose
    # only effect is on values it built itself.
    def forward(self, tensors: List[torch.Tensor]) -> int:
        for t in tensors:
            t.set_()
        return len(tensors)


def check(module: torch.jit.ScriptModule) -> None:
    """A leaf's .grad handed to the module is empty afterwards, seen through the leaf too; other tensors keep theirs."""
    leaf = torch.ones(1000, requires_grad=True)
    (leaf * 2).sum().backward()
    kept = torch.ones(3)
    if module([leaf.grad]) != 1 or leaf.grad is None or leaf.grad.numel() != 0 or kept.numel() != 3:
        raise SystemExit("the scripted release left the gradient's storage in place")


def main(path: str) -> None:
    write_checked(ReleaseStorage(), check, path)


if __name__ == "__main__":
    main(sys.argv[1])
