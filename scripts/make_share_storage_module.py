"""Writes the TorchScript archive through which mcore4j points tensors at another tensor's memory (ZeRO-3).

Under --data-parallel-sharding-strategy optim_grads_params a parameter's tensor holds its values only
while a layer reads them: release_storage.pt empties it (Tensor.set_()), and this module makes it again a
view of the all-gathered bucket, with the parameter's shape, without copying: Tensor.set_(source) on the
same tensor object, so the parameter, its autograd leaf and every handle to it keep their identity. Both
run with grad mode off (a parameter is a leaf that requires grad). It has no parameters and no state:

- forward(targets, sources): targets[i].set_(sources[i]) for every i; returns how many

Why set_ and not a resize of the storage's bytes (PyTorch FSDP2's torch.ops.inductor.resize_storage_bytes_,
or Python's untyped_storage().resize_()): that op is registered by libtorch_python only, so DJL's libtorch
cannot call it, and TorchScript has no untyped_storage(). set_ bumps the tensor's version counter, so a
graph that saved the tensor cannot run backward after it: ZeRO-3 therefore recomputes each layer
(Recompute), whose first run saves nothing and whose rerun in backward reads the gathered weights again.

Usage: python3 scripts/make_share_storage_module.py core/src/main/resources/io/mcore4j/core/torchscript/share_storage.pt
"""
import sys
from typing import List

import torch

from torchscript_archive import write_checked


class ShareStorage(torch.nn.Module):
    # The lists are graph inputs on purpose: set_ mutates their tensors, and TorchScript drops a call whose
    # only effect is on values it built itself.
    def forward(self, targets: List[torch.Tensor], sources: List[torch.Tensor]) -> int:
        if len(targets) != len(sources):
            raise ValueError("share_storage: " + str(len(targets)) + " targets but " + str(len(sources)) + " sources")
        with torch.no_grad():
            for i in range(len(targets)):
                targets[i].set_(sources[i])
        return len(targets)


def check(module: torch.jit.ScriptModule) -> None:
    """A parameter emptied, then pointed at a view of a flat buffer, trains as before: same values, same
    gradients, the flat buffer's memory (no copy), the same leaf."""
    torch.manual_seed(0)
    weight = torch.nn.Parameter(torch.randn(3, 4))
    x = torch.randn(2, 4)
    (x @ weight.t()).square().sum().backward()
    expected = weight.grad.clone()
    values = weight.detach().clone()
    weight.grad = None
    with torch.no_grad():
        weight.set_()
    if weight.numel() != 0:
        raise SystemExit("set_() left the parameter's values")
    flat = torch.zeros(20)
    flat[5:17] = values.reshape(-1)
    view = flat[5:17].view(3, 4)
    if module([weight], [view]) != 1:
        raise SystemExit("the module did not report one tensor")
    if weight.shape != (3, 4) or weight.data_ptr() != view.data_ptr() or not torch.equal(weight.detach(), values):
        raise SystemExit("the parameter is not the view of the flat buffer")
    (x @ weight.t()).square().sum().backward()
    if not torch.equal(weight.grad, expected) or not weight.is_leaf or not weight.requires_grad:
        raise SystemExit("the refilled parameter trains differently")


def main(path: str) -> None:
    write_checked(ShareStorage(), check, path)


if __name__ == "__main__":
    main(sys.argv[1])
