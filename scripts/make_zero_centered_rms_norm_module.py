"""Writes the TorchScript archive that mcore4j's RMSNorm (models' Norm) loads for zero-centred weights.

The module is mcore4j's own: RMSNorm whose weight is stored centred on zero (Megatron-Core's
layernorm_zero_centered_gamma, Gemma's norms): y = x / sqrt(mean(x^2) + eps) * (1 + weight), normalised and
scaled in float32 (the weight too) and returned in x's dtype, as Gemma computes it. eps comes as a 0-dim CPU
float64 tensor so that no device is read.

Usage: python3 scripts/make_zero_centered_rms_norm_module.py \
    models/src/main/resources/io/mcore4j/models/torchscript/zero_centered_rms_norm.pt
"""
import sys

import torch

from torchscript_archive import write_checked


class ZeroCenteredRmsNorm(torch.nn.Module):
    def forward(self, x: torch.Tensor, weight: torch.Tensor, eps: torch.Tensor) -> torch.Tensor:
        normed = torch.rms_norm(x.float(), [x.size(-1)], None, eps.item())
        return (normed * (1.0 + weight.float())).to(x.dtype)


def check(module: torch.jit.ScriptModule) -> None:
    """Against the definition (computed in float32 from float64 inputs), with gradients; bfloat16 comes back as bfloat16."""
    x = torch.randn(3, 2, 8, dtype=torch.float64, requires_grad=True)
    w = torch.randn(8, dtype=torch.float64, requires_grad=True)
    want = x / torch.sqrt(x.square().mean(-1, keepdim=True) + 1e-6) * (1 + w)
    got = module(x, w, torch.tensor(1e-6, dtype=torch.float64))
    if got.dtype != torch.float64 or not torch.allclose(got, want, atol=1e-5):
        raise SystemExit(f"the scripted norm gave {got}, want {want}")
    g = torch.randn_like(want)
    gx, gw = torch.autograd.grad(want, (x, w), g)
    hx, hw = torch.autograd.grad(got, (x, w), g)
    if not (torch.allclose(gx, hx, atol=1e-4) and torch.allclose(gw, hw, atol=1e-4)):
        raise SystemExit("the scripted norm's gradients differ from the definition's")
    half = module(x.detach().bfloat16(), w.detach().bfloat16(), torch.tensor(1e-6, dtype=torch.float64))
    if half.dtype != torch.bfloat16:
        raise SystemExit(f"a bfloat16 input came back as {half.dtype}")


def main(path: str) -> None:
    write_checked(ZeroCenteredRmsNorm(), check, path)


if __name__ == "__main__":
    main(sys.argv[1])
