"""Writes the TorchScript archive through which mcore4j copies host data to a GPU without a host wait.

DJL creates a device tensor from Java data with a copy from pageable host memory. CUDA runs such a
copy only after every kernel queued before it on the stream, and the host waits for it: at the start
of a training step the micro-batch's token upload therefore waited for the whole previous optimizer
step, and the GPU then idled while the host queued the next forward. This module of ours copies the
host tensor into pinned (page-locked) memory and queues an asynchronous copy from there
(non_blocking=True): the host goes on at once, and libtorch's pinned-memory cache keeps the staging
block until the copy has run. It has no parameters and no state:

- forward(x, like): a copy of the CPU tensor x on like's device (like is only read for its device);
  through pinned memory and non-blocking when that device is a CUDA device, a plain copy otherwise
  (pin_memory needs a CUDA build of libtorch, so it is called only when a CUDA device is the target)

Usage: python3 scripts/make_pinned_copy_module.py core/src/main/resources/io/mcore4j/core/torchscript/pinned_copy.pt
"""
import sys

import torch
from torch import Tensor

from torchscript_archive import write_checked


class PinnedCopy(torch.nn.Module):
    def forward(self, x: Tensor, like: Tensor) -> Tensor:
        if like.is_cuda:
            return x.pin_memory().to(like.device, non_blocking=True)
        return x.to(like.device, copy=True)


def check(module: torch.jit.ScriptModule) -> None:
    x = torch.arange(-6, 6, dtype=torch.int32).reshape(3, 4)
    y = module(x, torch.zeros(0, dtype=torch.int8))
    if y.dtype != torch.int32 or not torch.equal(y, x) or y.data_ptr() == x.data_ptr():
        raise SystemExit(f"the scripted host copy gave {y}")
    if torch.cuda.is_available():
        like = torch.zeros(0, dtype=torch.int8, device="cuda")
        z = module(x, like)
        if not z.is_cuda or not torch.equal(z.cpu(), x):
            raise SystemExit(f"the scripted pinned copy gave {z}")


def main(path: str) -> None:
    write_checked(PinnedCopy(), check, path)


if __name__ == "__main__":
    main(sys.argv[1])
