"""Writes the TorchScript archive through which mcore4j adds each local expert's bias to that expert's rows on the
grouped GEMM path (--moe-grouped-gemm with libtorch's grouped kernel), mcore4j's own module:

expert_bias.pt: forward(rows [N, n], biases [E, n], ends [E] int32 or int64) -> [N, n], where rows
ends[e-1]:ends[e] belong to expert e (an expert with no rows has ends[e] == ends[e-1]) and get biases[e] added:
one torch.addmm(rows, one_hot, biases), the [N, E] one-hot map of each row's expert built on the device from the
ends. Its backward passes the rows' gradient through and computes the biases' as one_hot^T @ gradient, one product,
with no atomic adds (an index-select's backward would add N rows into E bias rows with atomics) and no copy of the
rows (a split per expert, an add each and a concatenation copy them twice). The one-hot product adds each bias
exactly (1 * b + 0 * the others, accumulated in float32), so the sum equals rows + bias to the dtype's rounding.

Usage: python3 scripts/make_expert_bias_module.py moe/src/main/resources/io/mcore4j/moe
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torchscript_archive import write_checked  # noqa: E402


class ExpertBias(torch.nn.Module):
    def forward(self, rows: torch.Tensor, biases: torch.Tensor, ends: torch.Tensor) -> torch.Tensor:
        ends = ends.to(torch.int64)
        starts = torch.cat([ends.new_zeros(1), ends[:-1]])
        row = torch.arange(rows.size(0), device=rows.device).unsqueeze(1)
        one_hot = ((row >= starts.unsqueeze(0)) & (row < ends.unsqueeze(0))).to(rows.dtype)
        return torch.addmm(rows, one_hot, biases.to(rows.dtype))


def check(module: torch.jit.ScriptModule) -> None:
    """Against a split, an add per expert and a concatenation, forward and gradients, with experts of no rows."""
    torch.manual_seed(0)
    for counts in ([0, 3, 0, 5, 0], [4, 4, 4, 4, 4], [0, 0, 0, 0, 7], [0, 0]):
        rows = torch.randn(sum(counts), 8, dtype=torch.float64, requires_grad=True)
        biases = torch.randn(len(counts), 8, dtype=torch.float64, requires_grad=True)
        ends = torch.tensor(counts).cumsum(0).to(torch.int32)
        upstream = torch.randn(sum(counts), 8, dtype=torch.float64)
        got = module(rows, biases, ends)
        parts = [part + biases[e] for e, part in enumerate(rows.split(counts))]
        want = torch.cat(parts) + 0 * biases.sum()
        got_rows, got_biases = torch.autograd.grad(got, (rows, biases), upstream, allow_unused=True)
        want_rows, want_biases = torch.autograd.grad(want, (rows, biases), upstream)
        for name, a, b in (("output", got, want), ("rows' gradient", got_rows, want_rows),
                           ("biases' gradient", got_biases, want_biases)):
            if not torch.allclose(a, b, atol=1e-12):
                raise SystemExit(f"expert_bias's {name} differs from the per-expert adds for counts {counts}")


def main(folder: str) -> None:
    write_checked(ExpertBias(), check, os.path.join(folder, "expert_bias.pt"))


if __name__ == "__main__":
    main(sys.argv[1])
