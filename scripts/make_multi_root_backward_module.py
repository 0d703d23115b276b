"""Writes the TorchScript archive through which mcore4j's AutogradScope back-propagates several roots at once.

The module is mcore4j's own: one call of torch.autograd.backward(roots, grads, retain_graph=True),
a single traversal of the graph behind all the roots. DJL's JNI offers backward from one tensor only;
the scope used to make one root of several as sum((root * grad).sum()), which costs a product, a
reduction and their backward per root (about 0.25 ms per layer of a LLaMA-7B on an H200). The
module returns its first gradient (DJL wants an output); it has no parameters and no state.

Usage: python3 scripts/make_multi_root_backward_module.py core/src/main/resources/io/mcore4j/core/torchscript/multi_root_backward.pt
"""
import sys
from typing import List, Optional

import torch

from torchscript_archive import write_checked


class MultiRootBackward(torch.nn.Module):
    def forward(self, roots: List[torch.Tensor], grads: List[torch.Tensor]) -> torch.Tensor:
        upstream: List[Optional[torch.Tensor]] = []
        for g in grads:
            upstream.append(g)
        torch.autograd.backward(roots, upstream, retain_graph=True)
        return grads[0]


def check(module: torch.jit.ScriptModule) -> None:
    """Two roots sharing a leaf: the leaf's gradient is the sum of both paths'."""
    a = torch.randn(4, dtype=torch.float64, requires_grad=True)
    g1, g2 = torch.randn(4, dtype=torch.float64), torch.randn(4, dtype=torch.float64)
    module([a * 2, a.sin()], [g1, g2])
    if not torch.allclose(a.grad, 2 * g1 + a.detach().cos() * g2, atol=1e-12):
        raise SystemExit("the scripted multi-root backward gave the wrong gradient")


def main(path: str) -> None:
    write_checked(MultiRootBackward(), check, path)


if __name__ == "__main__":
    main(sys.argv[1])
