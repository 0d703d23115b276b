"""Writes the TorchScript archive that mcore4j's fused Adam update loads.

The module is mcore4j's own: one call of libtorch's fused Adam (coupled, L2 weight decay) or AdamW
(decoupled weight decay) kernel on lists of flat fp32 tensors (parameters, gradients, first and
second moments). The kernel divides the gradients by `grad_scale` (the loss scale over the clipping
coefficient) inside its pass. The hyperparameters come in a CPU float64 tensor
[lr, beta1, beta2, eps, weight_decay, decoupled], so that reading them never waits for the device.

Usage: python3 scripts/make_fused_adam_module.py optimizer/src/main/resources/io/mcore4j/optimizer/fused_adam.pt
"""
import sys
from typing import List

import torch

from torchscript_archive import write_checked


class FusedAdam(torch.nn.Module):
    # The lists are graph inputs on purpose: the kernel mutates their tensors in place, and TorchScript
    # drops a call whose only effect is on lists it built itself (it saw no side effect).
    def forward(self, params: List[torch.Tensor], grads: List[torch.Tensor], exp_avgs: List[torch.Tensor],
                exp_avg_sqs: List[torch.Tensor], steps: List[torch.Tensor], hyper: torch.Tensor,
                grad_scale: torch.Tensor) -> torch.Tensor:
        h: List[float] = hyper.tolist()
        if h[5] != 0.0:
            torch._fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, [], steps, lr=h[0], beta1=h[1], beta2=h[2],
                                weight_decay=h[4], eps=h[3], amsgrad=False, maximize=False, grad_scale=grad_scale)
        else:
            torch._fused_adam_(params, grads, exp_avgs, exp_avg_sqs, [], steps, lr=h[0], beta1=h[1], beta2=h[2],
                               weight_decay=h[4], eps=h[3], amsgrad=False, maximize=False, grad_scale=grad_scale)
        return hyper


def check(module: torch.jit.ScriptModule) -> None:
    """One step from p=[1, 2], g=[0.5, -1] given scaled by 4, lr 0.1 must give p=[0.9, 2.1] (Adam's first
    step is lr * sign(g)); with decoupled decay 0.5 first p *= 1 - 0.05."""
    for device in ["cpu"] + (["cuda"] if torch.cuda.is_available() else []):
        for decoupled, want in [(0.0, [0.9, 2.1]), (1.0, [0.95 - 0.1, 1.9 + 0.1])]:
            p = torch.tensor([1.0, 2.0], device=device)
            args = ([p], [torch.tensor([2.0, -4.0], device=device)], [torch.zeros(2, device=device)],
                    [torch.zeros(2, device=device)], [torch.tensor(1.0, device=device)],
                    torch.tensor([0.1, 0.9, 0.999, 1e-8, 0.5 * decoupled, decoupled], dtype=torch.float64),
                    torch.tensor(4.0, device=device))
            module(*args)
            if not torch.allclose(p.cpu(), torch.tensor(want), atol=1e-6):
                raise SystemExit(f"the scripted fused Adam gave {p} on {device}, decoupled {decoupled}; want {want}")


def main(path: str) -> None:
    write_checked(FusedAdam(), check, path)


if __name__ == "__main__":
    main(sys.argv[1])
