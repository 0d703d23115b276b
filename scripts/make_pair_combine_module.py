"""Writes pair_combine.pt, mcore4j's own TorchScript archive through which the fused token permutation combines the
experts' rows when every token has the same number k of pairs (dropless routing: no capacity), with gathers only.

The general unpermute (unpermute_tokens.pt) adds each weighted row into its token with an index_add, whose kernel
adds element by element with atomics; with k pairs per token the pairs can be laid out token by token instead, and
each token's rows gathered and summed. Methods (rows [N, h] come expert by expert, N = T * k):

- forward(tokens [T, h], routing_map [T, E], pairs (a host int64 scalar, N)) -> (rows [N, h], token_of_row [N],
  expert_of_row [N], row_of_pair [T, k], pair_of_row [N], expert_of_pair [T, k]): permute_tokens.pt's permutation
  (the same scripted module, make_token_permutation_modules.py's PermuteTokens), then the rows of each token in expert
  order (a stable sort of the rows by token), its inverse (row i is pair pair_of_row[i] = t * k + j) and each pair's
  expert, in one call;
- permute_pairs(tokens [T, h], indices [T, k] int64, each token's k distinct experts in any order, routing_map
  [T, E] their map) -> the same six outputs as forward on that map, from the indices: each token's experts sorted,
  then a stable sort of all pairs by expert (no nonzero over the map, no sort of the rows by token); and the map's
  column sums [1, E] int64 (the rows per expert, which the dispatch all-gathers);
- combine(rows, row_of_pair, expert_of_pair [T, k], probs [T, E]) -> [T, h]:
  out[t] = sum_j probs[t, e_j] * rows[row_of_pair[t, j]] (dropless routing keeps every pair: no kept map), computed
  in the promoted dtype of rows and probs (as Megatron-Core's unpermute does) by one batched product
  [T, 1, k] x [T, k, h], in rows' dtype;
- combine_backward(rows, token_of_row, row_of_pair, pair_of_row, expert_of_pair, probs, grad [T, h])
  -> (d_rows [N, h], d_probs [T, E]): the gradients of combine, every row's by gathers (no atomics);
- sum_rows(rows, row_of_pair) -> [T, h]: each token's rows summed (float32 sums for a lower-precision dtype), the
  transpose of the permutation's gather, in rows' dtype.

Usage: python3 scripts/make_pair_combine_module.py moe/src/main/resources/io/mcore4j/moe
"""
import os
import sys
from typing import Tuple

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torchscript_archive import write_checked  # noqa: E402
from make_token_permutation_modules import PermuteTokens  # noqa: E402


class PairCombine(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.permute = PermuteTokens()

    def forward(self, tokens: torch.Tensor, routing_map: torch.Tensor, pairs: torch.Tensor) \
            -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        rows, token_of_row, expert_of_row = self.permute(tokens, routing_map, pairs)
        row_of_pair, pair_of_row, expert_of_pair = self.list_pairs(token_of_row, expert_of_row, routing_map)
        return rows, token_of_row, expert_of_row, row_of_pair, pair_of_row, expert_of_pair

    @torch.jit.export
    def permute_pairs(self, tokens: torch.Tensor, indices: torch.Tensor, routing_map: torch.Tensor) \
            -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        t, k = indices.size(0), indices.size(1)
        n = t * k
        expert_of_pair = torch.sort(indices, dim=1).values  # each token's experts in expert order
        expert_of_row, pair_of_row = torch.sort(expert_of_pair.reshape(-1), stable=True)  # expert-major, tokens ascending
        token_of_row = torch.div(pair_of_row, k, rounding_mode="floor")
        row_of_pair = torch.empty_like(pair_of_row)
        row_of_pair.index_copy_(0, pair_of_row, torch.arange(n, dtype=pair_of_row.dtype, device=pair_of_row.device))
        counts = routing_map.sum(0, dtype=torch.int64).view(1, -1)
        return (tokens.index_select(0, token_of_row), token_of_row, expert_of_row, row_of_pair.view(t, k), pair_of_row,
                expert_of_pair, counts)

    def list_pairs(self, token_of_row: torch.Tensor, expert_of_row: torch.Tensor,
                   routing_map: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        tokens = routing_map.size(0)
        n = token_of_row.size(0)
        row_of_pair = torch.argsort(token_of_row, stable=True)
        pair_of_row = torch.empty_like(row_of_pair)
        pair_of_row.index_copy_(0, row_of_pair, torch.arange(n, dtype=row_of_pair.dtype, device=row_of_pair.device))
        expert_of_pair = expert_of_row.index_select(0, row_of_pair)
        return row_of_pair.view(tokens, n // tokens), pair_of_row, expert_of_pair.view(tokens, n // tokens)

    @torch.jit.export
    def combine(self, rows: torch.Tensor, row_of_pair: torch.Tensor, expert_of_pair: torch.Tensor,
                probs: torch.Tensor) -> torch.Tensor:
        promoted = torch.promote_types(rows.dtype, probs.dtype)
        tokens, k = row_of_pair.size(0), row_of_pair.size(1)
        weights = probs.gather(1, expert_of_pair).to(promoted)
        picked = rows.index_select(0, row_of_pair.reshape(-1)).view(tokens, k, rows.size(1)).to(promoted)
        return torch.bmm(weights.unsqueeze(1), picked).squeeze(1).to(rows.dtype)

    @torch.jit.export
    def combine_backward(self, rows: torch.Tensor, token_of_row: torch.Tensor, row_of_pair: torch.Tensor,
                         pair_of_row: torch.Tensor, expert_of_pair: torch.Tensor, probs: torch.Tensor,
                         grad: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        promoted = torch.promote_types(rows.dtype, probs.dtype)
        tokens, k = row_of_pair.size(0), row_of_pair.size(1)
        weights = probs.gather(1, expert_of_pair).to(promoted)
        # row i's gradient: its pair's weight times its token's gradient, in the promoted dtype, rounded once
        d_rows = (grad.index_select(0, token_of_row).to(promoted)
                  * weights.reshape(-1).index_select(0, pair_of_row).unsqueeze(-1)).to(rows.dtype)
        picked = rows.index_select(0, row_of_pair.reshape(-1)).view(tokens, k, rows.size(1)).to(promoted)
        d_weights = torch.bmm(picked, grad.to(promoted).unsqueeze(-1)).squeeze(-1)
        d_probs = torch.zeros_like(probs).scatter(1, expert_of_pair, d_weights.to(probs.dtype))
        return d_rows, d_probs

    @torch.jit.export
    def sum_rows(self, rows: torch.Tensor, row_of_pair: torch.Tensor) -> torch.Tensor:
        tokens, k = row_of_pair.size(0), row_of_pair.size(1)
        picked = rows.index_select(0, row_of_pair.reshape(-1)).view(tokens, k, rows.size(1))
        return picked.sum(1, dtype=torch.promote_types(rows.dtype, torch.float32)).to(rows.dtype)


def check(module: torch.jit.ScriptModule, device: str = "cpu") -> None:
    """Against the general unpermute's definition (index_add of the weighted rows), values and gradients, on a
    device (scripts/gpu/moe-modules-check.py runs it on CUDA)."""
    torch.manual_seed(0)
    tokens, experts, hidden, k = 7, 5, 6, 2
    for dtype in (torch.float64, torch.bfloat16):
        scores = torch.rand(tokens, experts, dtype=torch.float64)
        chosen = scores.topk(k, dim=1).indices
        routing_map = torch.zeros(tokens, experts, dtype=torch.float32).scatter(1, chosen, 1.0)
        routing_map = routing_map.to(device)
        kept_map = routing_map  # dropless: every dispatched pair is kept
        probs = (torch.rand(tokens, experts, dtype=torch.float32).to(device) * routing_map).requires_grad_()
        pairs = routing_map.t().nonzero()  # expert-major, tokens ascending
        expert_of_row, token_of_row = pairs[:, 0].contiguous(), pairs[:, 1].contiguous()
        n = token_of_row.size(0)
        x = torch.randn(tokens, hidden, dtype=torch.float64).to(dtype).to(device)
        permuted, token_of_row2, expert_of_row2, row_of_pair, pair_of_row, expert_of_pair = module(
            x, routing_map, torch.tensor(n, dtype=torch.int64))
        if not (torch.equal(token_of_row2, token_of_row) and torch.equal(expert_of_row2, expert_of_row)
                and torch.equal(permuted, x[token_of_row])):
            raise SystemExit("the permutation's pairs or rows differ from the map's, expert-major")
        rows = torch.randn(n, hidden, dtype=torch.float64).to(dtype).to(device).requires_grad_()
        if not torch.equal(row_of_pair.reshape(-1)[pair_of_row], torch.arange(n, device=device)):
            raise SystemExit("pair_of_row is not the inverse of row_of_pair")
        if not torch.equal(token_of_row[row_of_pair], torch.arange(tokens, device=device).unsqueeze(1).expand(tokens, k)):
            raise SystemExit("row_of_pair does not list each token's rows")
        if not torch.equal(expert_of_pair, expert_of_row[row_of_pair]):
            raise SystemExit("expert_of_pair is not each pair's expert")
        if not bool((expert_of_pair[:, 1:] > expert_of_pair[:, :-1]).all()):
            raise SystemExit("a token's rows are not in expert order")
        # from the top-k indices (in the router's order, not sorted): the same six outputs
        by_indices = module.permute_pairs(x, chosen.to(device), routing_map)
        if not all(torch.equal(a, b) for a, b in zip(by_indices, (permuted, token_of_row2, expert_of_row2, row_of_pair,
                                                                  pair_of_row, expert_of_pair))):
            raise SystemExit("permute_pairs differs from forward on the map of the same indices")
        if not torch.equal(by_indices[6], routing_map.sum(0).long().view(1, -1)):
            raise SystemExit("permute_pairs' counts are not the map's column sums")
        # the definition
        promoted = torch.promote_types(dtype, torch.float32)
        weights = (probs * kept_map)[token_of_row, expert_of_row]
        weighted = rows.to(promoted) * weights.to(promoted).unsqueeze(-1)
        want = torch.zeros(tokens, hidden, dtype=promoted, device=device).index_add(0, token_of_row, weighted).to(dtype)
        upstream = torch.randn(tokens, hidden, dtype=torch.float64).to(dtype).to(device)
        want_rows, want_probs = torch.autograd.grad(want, (rows, probs), upstream)
        with torch.no_grad():
            got = module.combine(rows, row_of_pair, expert_of_pair, probs)
            got_rows, got_probs = module.combine_backward(rows, token_of_row, row_of_pair, pair_of_row,
                                                          expert_of_pair, probs, upstream)
            summed = module.sum_rows(rows, row_of_pair)
        want_sum = torch.zeros(tokens, hidden, dtype=promoted, device=device).index_add(0, token_of_row,
                                                                              rows.detach().to(promoted))
        tol = 1e-12 if dtype == torch.float64 else 1e-2
        for name, a, b in (("combine", got, want), ("rows' gradient", got_rows, want_rows),
                           ("probabilities' gradient", got_probs, want_probs), ("sum_rows", summed, want_sum.to(dtype))):
            if a.dtype != b.dtype or not torch.allclose(a.double(), b.double(), atol=tol, rtol=tol):
                raise SystemExit(f"{name} differs from its definition in {dtype}")


def main(folder: str) -> None:
    write_checked(PairCombine(), check, os.path.join(folder, "pair_combine.pt"))


if __name__ == "__main__":
    main(sys.argv[1])
