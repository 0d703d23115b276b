"""Writes the TorchScript archive through which mcore4j's grouped expert GEMM (--moe-grouped-gemm) calls
libtorch's grouped matrix product.

grouped_mm.pt: forward(rows [N, k], weights [E, n, k], ends [E] int32) -> [N, n], where rows
ends[e-1]:ends[e] are multiplied by weights[e]^T (an expert with no rows has ends[e] == ends[e-1]):
torch._grouped_mm with the weights as a column-major view, which libtorch differentiates itself.
torch._grouped_mm exists from libtorch 2.8 on: a libtorch without it fails to load this archive, and
mcore4j's GroupedMatmul then runs its own fallback (rows padded per expert, one batched matmul).

Usage: python3 scripts/make_grouped_mm_module.py moe/src/main/resources/io/mcore4j/moe
(with a torch >= 2.8; the check below runs on the CPU.)
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torchscript_archive import write_checked  # noqa: E402


class GroupedMm(torch.nn.Module):
    def forward(self, rows: torch.Tensor, weights: torch.Tensor, ends: torch.Tensor) -> torch.Tensor:
        return torch._grouped_mm(rows, weights.transpose(1, 2), offs=ends)


def check(module: torch.jit.ScriptModule) -> None:
    """Against one matmul per expert, forward and gradients, with experts of no rows first, inside and last."""
    torch.manual_seed(0)
    for counts in ([0, 3, 0, 5, 0], [4, 4, 4, 4, 4], [0, 0, 0, 0, 7]):
        rows = torch.randn(sum(counts), 16, requires_grad=True)
        weights = torch.randn(len(counts), 8, 16, requires_grad=True)
        ends = torch.tensor(counts, dtype=torch.int32).cumsum(0).to(torch.int32)
        upstream = torch.randn(sum(counts), 8)
        got = module(rows, weights, ends)
        got_rows, got_weights = torch.autograd.grad(got, (rows, weights), upstream)
        want = torch.cat([part @ weights[e].t() for e, part in enumerate(rows.split(counts))])
        want_rows, want_weights = torch.autograd.grad(want, (rows, weights), upstream)
        for name, a, b in (("output", got, want), ("rows' gradient", got_rows, want_rows),
                           ("weights' gradient", got_weights, want_weights)):
            if not torch.allclose(a, b, atol=1e-5):
                raise SystemExit(f"grouped_mm's {name} differs from the per-expert products for counts {counts}")


def main(folder: str) -> None:
    write_checked(GroupedMm(), check, os.path.join(folder, "grouped_mm.pt"))


if __name__ == "__main__":
    main(sys.argv[1])
