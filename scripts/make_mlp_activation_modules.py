"""Writes the TorchScript archives through which mcore4j's MlpActivation runs SwiGLU and GPT-2's GELU.

Both modules are mcore4j's own, one function each of linear_fc1's output:
- swiglu.pt: silu(gate) * up, where fc1's output is [gate; up] along the last dim;
- gelu_tanh.pt: GELU with the tanh approximation (GPT-2's), libtorch's gelu(approximate="tanh").
On CUDA, TorchScript's fuser runs SwiGLU as fused kernels that read the two strided halves directly
(the elementary ops take a sigmoid, two unvectorised products over the strided halves, and their
backward: about 0.7 ms of every LLaMA-7B layer on an H200, micro-batch 1, sequence 2048).

Usage: python3 scripts/make_mlp_activation_modules.py tensor-parallel/src/main/resources/io/mcore4j/tensorparallel
"""
import os
import sys

import torch
import torch.nn.functional as F


class SwiGlu(torch.nn.Module):
    def forward(self, pre: torch.Tensor) -> torch.Tensor:
        gate, up = pre.chunk(2, -1)
        return F.silu(gate) * up


class GeluTanh(torch.nn.Module):
    def forward(self, pre: torch.Tensor) -> torch.Tensor:
        return F.gelu(pre, approximate="tanh")


def check(swiglu: torch.jit.ScriptModule, gelu: torch.jit.ScriptModule) -> None:
    """Against the definitions, in float64, with gradients."""
    x = torch.randn(3, 2, 8, dtype=torch.float64, requires_grad=True)
    g, u = x[..., :4], x[..., 4:]
    cases = [(swiglu, g * torch.sigmoid(g) * u),
             (gelu, 0.5 * x * (1 + torch.tanh((2 / torch.pi) ** 0.5 * (x + 0.044715 * x ** 3))))]
    for module, want in cases:
        got = module(x)
        if not torch.allclose(got, want, atol=1e-12):
            raise SystemExit(f"{module.original_name} differs from its definition")
        up = torch.randn_like(want)
        if not torch.allclose(torch.autograd.grad(got, x, up)[0], torch.autograd.grad(want, x, up)[0], atol=1e-12):
            raise SystemExit(f"{module.original_name}'s gradient differs from its definition's")


def main(folder: str) -> None:
    swiglu, gelu = torch.jit.script(SwiGlu()), torch.jit.script(GeluTanh())
    check(swiglu, gelu)
    for module, name in [(swiglu, "swiglu.pt"), (gelu, "gelu_tanh.pt")]:
        path = os.path.join(folder, name)
        module.save(path)
        print(f"wrote {path} with torch {torch.__version__}")
    check(torch.jit.load(os.path.join(folder, "swiglu.pt")), torch.jit.load(os.path.join(folder, "gelu_tanh.pt")))


if __name__ == "__main__":
    main(sys.argv[1])
