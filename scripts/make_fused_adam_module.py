"""Writes the TorchScript archive that mcore4j's fused Adam update loads.

The module is mcore4j's own: one call of libtorch's fused Adam/AdamW kernel on one flat fp32
bucket (parameters, gradients, first and second moments), with the hyperparameters passed in a CPU
float64 tensor so that reading them never waits for the device. Weight decay is applied by the
caller (mcore4j masks it per parameter), so the kernel runs with weight_decay 0.

Usage: python3 scripts/make_fused_adam_module.py optimizer/src/main/resources/io/mcore4j/optimizer/fused_adam.pt
"""
import sys
from typing import List

import torch


class FusedAdam(torch.nn.Module):
    # The lists are graph inputs on purpose: the kernel mutates their tensors in place, and TorchScript
    # drops a call whose only effect is on lists it built itself (it saw no side effect).
    def forward(self, params: List[torch.Tensor], grads: List[torch.Tensor], exp_avgs: List[torch.Tensor],
                exp_avg_sqs: List[torch.Tensor], steps: List[torch.Tensor], hyper: torch.Tensor) -> torch.Tensor:
        h: List[float] = hyper.tolist()
        torch._fused_adam_(params, grads, exp_avgs, exp_avg_sqs, [], steps, lr=h[0], beta1=h[1], beta2=h[2],
                           weight_decay=0.0, eps=h[3], amsgrad=False, maximize=False)
        return hyper


def check(module: torch.jit.ScriptModule) -> None:
    """One step from p=[1, 2], g=[0.5, -1], lr 0.1 must give p=[0.9, 2.1] (Adam's first step is lr * sign(g))."""
    for device in ["cpu"] + (["cuda"] if torch.cuda.is_available() else []):
        p = torch.tensor([1.0, 2.0], device=device)
        args = ([p], [torch.tensor([0.5, -1.0], device=device)], [torch.zeros(2, device=device)],
                [torch.zeros(2, device=device)], [torch.tensor(1.0, device=device)],
                torch.tensor([0.1, 0.9, 0.999, 1e-8], dtype=torch.float64))
        module(*args)
        if not torch.allclose(p.cpu(), torch.tensor([0.9, 2.1]), atol=1e-6):
            raise SystemExit(f"the scripted fused Adam did not update the parameters on {device}: {p}")


def main(path: str) -> None:
    module = torch.jit.script(FusedAdam())
    check(module)
    module.save(path)
    check(torch.jit.load(path))
    print(module.code)
    print(f"wrote {path} with torch {torch.__version__}")


if __name__ == "__main__":
    main(sys.argv[1])
