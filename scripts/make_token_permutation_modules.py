"""Writes the TorchScript archives through which mcore4j permutes tokens into expert order and back in one
call each (--moe-permute-fusion), mcore4j's own modules:

- permute_tokens.pt: forward(tokens [T, h], routing_map [T, E] 0/1, pairs (an int64 scalar on the host: N, the
  map's ones, which the caller already knows)) -> (rows [N, h], token_of_row [N], expert_of_row [N]):
  the (token, expert) pairs of the map in expert-major order (expert 0's tokens ascending, then expert 1's...),
  each pair's token row, and the token and the expert of each row;
- unpermute_tokens.pt: forward(rows [N, h], token_of_row [N], expert_of_row [N], kept_map, probs [T, E]) -> [T, h]:
  out[t] = sum over the pairs (t, e) of probs[t, e] * kept_map[t, e] * rows[pair (t, e)], summed in the
  promoted dtype of rows and probs (as Megatron-Core's unpermute does) by one index_add, in rows' dtype.
Both are differentiable (index_select / index_add / indexing, whose backward libtorch computes). Neither waits for
the device: the pairs come from nonzero_static with the size given, and the weights are picked by the pairs'
indices (a masked_select or a nonzero would copy its count to the host first).

Usage: python3 scripts/make_token_permutation_modules.py moe/src/main/resources/io/mcore4j/moe
"""
import os
import sys
from typing import Tuple

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torchscript_archive import write_checked  # noqa: E402


class PermuteTokens(torch.nn.Module):
    def forward(self, tokens: torch.Tensor, routing_map: torch.Tensor,
                pairs: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        expert_token = torch.nonzero_static(routing_map.t() != 0, size=int(pairs.item()))  # [N, 2], row-major
        expert_of_row = expert_token[:, 0].contiguous()
        token_of_row = expert_token[:, 1].contiguous()
        return tokens.index_select(0, token_of_row), token_of_row, expert_of_row


class UnpermuteTokens(torch.nn.Module):
    def forward(self, rows: torch.Tensor, token_of_row: torch.Tensor, expert_of_row: torch.Tensor,
                kept_map: torch.Tensor, probs: torch.Tensor) -> torch.Tensor:
        weights = (probs * kept_map.to(probs.dtype))[token_of_row, expert_of_row]
        weighted = rows * weights.unsqueeze(-1)
        out = torch.zeros(probs.size(0), rows.size(1), dtype=weighted.dtype, device=rows.device)
        return out.index_add(0, token_of_row, weighted).to(rows.dtype)


def reference(tokens, routing_map, kept_map, probs, expert_fn):
    """Per expert, per token, in float64: the definition the modules must meet."""
    out = torch.zeros_like(tokens)
    rows = []
    for e in range(routing_map.size(1)):
        for t in range(routing_map.size(0)):
            if routing_map[t, e] != 0:
                rows.append(tokens[t])
    rows = expert_fn(torch.stack(rows)) if rows else tokens[:0]
    i = 0
    for e in range(routing_map.size(1)):
        for t in range(routing_map.size(0)):
            if routing_map[t, e] != 0:
                out[t] = out[t] + probs[t, e] * kept_map[t, e] * rows[i]
                i += 1
    return out


def check_pair(permute: torch.jit.ScriptModule, unpermute: torch.jit.ScriptModule) -> None:
    torch.manual_seed(0)
    tokens, experts, hidden = 6, 4, 5
    for routing_map in (torch.tensor([[1, 0, 1, 0], [0, 0, 1, 1], [1, 1, 0, 0], [0, 0, 0, 0], [1, 0, 0, 1], [0, 0, 1, 0]]),
                        torch.zeros(tokens, experts)):
        routing_map = routing_map.double()
        kept_map = routing_map.clone()
        kept_map[4, 3] = 0  # a dispatched pair that is not kept: its weight is 0
        probs = torch.rand(tokens, experts, dtype=torch.float64) * routing_map
        x = torch.randn(tokens, hidden, dtype=torch.float64, requires_grad=True)
        p = probs.clone().requires_grad_()
        scale = torch.randn(hidden, dtype=torch.float64)
        pairs = torch.tensor(int(routing_map.sum().item()), dtype=torch.int64)
        rows, token_of_row, expert_of_row = permute(x, routing_map, pairs)
        got = unpermute(rows * scale, token_of_row, expert_of_row, kept_map, p)
        x2 = x.detach().clone().requires_grad_()
        p2 = probs.clone().requires_grad_()
        want = reference(x2, routing_map, kept_map, p2, lambda r: r * scale)
        upstream = torch.randn(tokens, hidden, dtype=torch.float64)
        if not torch.allclose(got, want, atol=1e-12):
            raise SystemExit("the permutation and its inverse differ from their definition")
        # zero terms connect every input to the reference, so that an empty map has (zero) gradients too
        want = want + 0 * x2.sum() + 0 * p2.sum()
        got = got + 0 * x.sum() + 0 * p.sum()
        for a, b in zip(torch.autograd.grad(got, (x, p), upstream), torch.autograd.grad(want, (x2, p2), upstream)):
            if not torch.allclose(a, b, atol=1e-12):
                raise SystemExit("the permutation's gradients differ from their definition's")


def main(folder: str) -> None:
    permute, unpermute = torch.jit.script(PermuteTokens()), torch.jit.script(UnpermuteTokens())
    check_pair(permute, unpermute)
    for module, name in [(permute, "permute_tokens.pt"), (unpermute, "unpermute_tokens.pt")]:
        path = os.path.join(folder, name)
        module.save(path)
        print(module.code)
        print(f"wrote {path} with torch {torch.__version__}")
    check_pair(torch.jit.load(os.path.join(folder, "permute_tokens.pt")),
               torch.jit.load(os.path.join(folder, "unpermute_tokens.pt")))


if __name__ == "__main__":
    main(sys.argv[1])
