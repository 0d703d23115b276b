"""Writes the TorchScript archive of mcore4j's cross-entropy backward on one tensor-parallel rank.

VocabParallelCrossEntropy, with the whole vocabulary on one rank and no label smoothing, saves the float32
log-probabilities in forward. The gradient of the logits is (softmax - onehot(target)) * g, in the logits'
dtype. Composed from libtorch's ops that is four passes over the [tokens, vocabulary] float32 tensor (exp,
multiply, the target entries, the cast): ~1.7 ms per micro-batch of the 1.3B benchmark on an H200. In this
module the elementwise chain exp -> multiply -> cast is one expression, which libtorch's graph fuser runs as
one kernel on CUDA (reads the float32 log-probabilities once, writes the gradient in its own dtype); the
target entries are then written by a scatter. Same operations in the same order per element as the composed
form. No parameters, no state:

- forward(log_probs [..., V] float32, ids [..., 1] int64, grad [..., 1] float32, like): the gradient in
  like's dtype (like is only read for its dtype)

Usage: python3 scripts/make_cross_entropy_grad_module.py tensor-parallel/src/main/resources/io/mcore4j/tensorparallel/cross_entropy_grad.pt
"""
import sys

import torch
from torch import Tensor

from torchscript_archive import write_checked


class CrossEntropyGrad(torch.nn.Module):
    # One branch per dtype, so that each cast has a constant dtype, which the fuser folds into the kernel
    # (a cast to a dtype read at run time stays a separate pass).
    def forward(self, log_probs: Tensor, ids: Tensor, grad: Tensor, like: Tensor) -> Tensor:
        at_target = (log_probs.gather(-1, ids).exp() - 1.0) * grad
        if like.dtype == torch.float16:
            out = (log_probs.exp() * grad).to(torch.float16)
            return out.scatter_(-1, ids, at_target.to(torch.float16))
        if like.dtype == torch.bfloat16:
            out = (log_probs.exp() * grad).to(torch.bfloat16)
            return out.scatter_(-1, ids, at_target.to(torch.bfloat16))
        out = (log_probs.exp() * grad).to(like.dtype)
        return out.scatter_(-1, ids, at_target.to(like.dtype))


def check(module: torch.jit.ScriptModule) -> None:
    """Against autograd's gradient of F.cross_entropy(sum) scaled per token, float32 and float16 outputs."""
    torch.manual_seed(0)
    logits = torch.randn(5, 3, 11, requires_grad=True)
    target = torch.randint(0, 11, (5, 3))
    weights = torch.rand(5, 3)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 11), target.reshape(-1), reduction="none")
    (loss * weights.reshape(-1)).sum().backward()
    log_probs = torch.log_softmax(logits.detach(), -1)
    for dtype, tolerance in [(torch.float32, 1e-6), (torch.float16, 1e-3), (torch.bfloat16, 1e-2)]:
        got = module(log_probs, target.unsqueeze(-1), weights.unsqueeze(-1), torch.empty(0, dtype=dtype))
        if got.dtype != dtype or not torch.allclose(got.float(), logits.grad, atol=tolerance):
            raise SystemExit(f"the scripted cross-entropy gradient differs from autograd's ({dtype})")


def main(path: str) -> None:
    write_checked(CrossEntropyGrad(), check, path)


if __name__ == "__main__":
    main(sys.argv[1])
