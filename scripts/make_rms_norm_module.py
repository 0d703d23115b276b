"""Writes the TorchScript archive that mcore4j's RMSNorm (models' Norm) loads.

The module is mcore4j's own: one call of libtorch's rms_norm over the last dim,
y = x / sqrt(mean(x^2) + eps) * weight, accumulated in float32 for float16/bfloat16 inputs and
returned in x's dtype. On CUDA, libtorch 2.8+ runs it as one fused kernel forward and two backward
(measured on an H200 with torch 2.11 for a [2048, 1, 4096] float16 input: 5 kernels and 0.057 ms
forward + backward, against 31 kernels and 0.510 ms for the same function from elementary ops);
elsewhere libtorch composes it. eps comes as a 0-dim CPU float64 tensor so that no device is read.

Usage: python3 scripts/make_rms_norm_module.py models/src/main/resources/io/mcore4j/models/torchscript/rms_norm.pt
"""
import sys

import torch

from torchscript_archive import write_checked


class RmsNorm(torch.nn.Module):
    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: torch.Tensor) -> torch.Tensor:
        return torch.rms_norm(x, [x.size(-1)], weight, eps.item())


def check(module: torch.jit.ScriptModule) -> None:
    """Against the definition, in float64, with gradients."""
    x = torch.randn(3, 2, 8, dtype=torch.float64, requires_grad=True)
    w = torch.randn(8, dtype=torch.float64, requires_grad=True)
    want = x / torch.sqrt(x.square().mean(-1, keepdim=True) + 1e-5) * w
    got = module(x, w, torch.tensor(1e-5, dtype=torch.float64))
    if not torch.allclose(got, want, atol=1e-12):
        raise SystemExit(f"the scripted rms_norm gave {got}, want {want}")
    g = torch.randn_like(want)
    gx, gw = torch.autograd.grad(want, (x, w), g)
    hx, hw = torch.autograd.grad(module(x, w, torch.tensor(1e-5, dtype=torch.float64)), (x, w), g)
    if not (torch.allclose(gx, hx, atol=1e-12) and torch.allclose(gw, hw, atol=1e-12)):
        raise SystemExit("the scripted rms_norm's gradients differ from the definition's")


def main(path: str) -> None:
    write_checked(RmsNorm(), check, path)


if __name__ == "__main__":
    main(sys.argv[1])
