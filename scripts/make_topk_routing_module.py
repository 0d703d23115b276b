"""Writes the TorchScript archive through which mcore4j's router chooses each token's top-k experts in one call
(io.mcore4j.moe.TopKRouting, routing without expert groups), mcore4j's own module:

- topk_routing.pt: forward(logits [T, E], expert_bias [E] float32 (read only when options say so),
  options [6] float64 on the host: top_k, sigmoid (0/1), pre_softmax (0/1), scaling_factor, has_bias (0/1),
  aux (0/1)) -> (indices [T, k] int64, top_probs [T, k], probs [T, E], routing_map [T, E] float32 0/1,
  aux_scores [T, E] float32, aux_map [T, E] float32 0/1; both empty without aux): Megatron-Core's
  topk_routing_with_score_function as TopKRouting's composed path computes it, op for op: scores in float32
  (softmax of the top-k logits, softmax before the top-k, or sigmoid scores normalised over the top-k when k > 1),
  the expert bias added to a detached float32 copy of the scores for the choice only, libtorch's sorted top-k,
  the scaling factor, the probabilities cast back to the logits' dtype and scattered into [T, E], and the 0/1 map;
  with aux, compute_routing_scores_for_aux_loss (softmax over all experts, or sigmoid scores normalised over all
  experts, in float32) and the 0/1 top-k map of those scores, which the load-balancing losses count.
Differentiable in the logits (gather, softmax, sigmoid, dtype casts and scatter, whose backward libtorch computes):
the casts between the logits' dtype and float32 are libtorch's own, inside the call.

Usage: python3 scripts/make_topk_routing_module.py moe/src/main/resources/io/mcore4j/moe
"""
import os
import sys
from typing import List, Tuple

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torchscript_archive import write_checked  # noqa: E402


class TopKRouting(torch.nn.Module):
    def forward(self, logits: torch.Tensor, expert_bias: torch.Tensor,
                options: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                                                torch.Tensor, torch.Tensor]:
        o: List[float] = options.tolist()
        k = int(o[0])
        sigmoid = o[1] != 0.0
        pre_softmax = o[2] != 0.0
        scaling = o[3]
        has_bias = o[4] != 0.0
        aux = o[5] != 0.0
        if sigmoid:
            scores = torch.sigmoid(logits.to(torch.float32))
            indices = torch.topk(self.for_choice(scores, expert_bias, has_bias), k, dim=1).indices
            chosen = scores.gather(1, indices)
            probs = chosen / (chosen.sum(dim=1, keepdim=True) + 1e-20) if k > 1 else chosen
        elif pre_softmax:
            scores = torch.softmax(logits.to(torch.float32), dim=-1)
            indices = torch.topk(self.for_choice(scores, expert_bias, has_bias), k, dim=1).indices
            probs = scores.gather(1, indices)
        else:
            indices = torch.topk(self.for_choice(logits, expert_bias, has_bias), k, dim=1).indices
            probs = torch.softmax(logits.gather(1, indices).to(torch.float32), dim=-1)
        if scaling != 1.0:
            probs = probs * scaling
        probs = probs.to(logits.dtype)
        shape = [logits.size(0), logits.size(1)]
        routing_map = torch.zeros(shape, dtype=torch.float32, device=logits.device).scatter(1, indices, 1.0)
        scattered = torch.zeros(shape, dtype=logits.dtype, device=logits.device).scatter(1, indices, probs)
        if aux:
            if sigmoid:
                s = torch.sigmoid(logits.to(torch.float32))
                aux_scores = s / (s.sum(dim=1, keepdim=True) + 1e-20)
            else:
                aux_scores = torch.softmax(logits.to(torch.float32), dim=-1)
            aux_map = torch.zeros(shape, dtype=torch.float32, device=logits.device).scatter(
                1, torch.topk(aux_scores, k, dim=1).indices, 1.0)
        else:
            aux_scores = torch.empty([0], dtype=torch.float32, device=logits.device)
            aux_map = aux_scores
        return indices, probs, scattered, routing_map, aux_scores, aux_map

    def for_choice(self, scores: torch.Tensor, expert_bias: torch.Tensor, has_bias: bool) -> torch.Tensor:
        if has_bias:
            return scores.detach().to(torch.float32) + expert_bias
        return scores


def reference(logits, expert_bias, k, sigmoid, pre_softmax, scaling):
    """Per token, from the definition: the choice by (biased) scores, the weights from the unbiased ones."""
    t, e = logits.shape
    probs = torch.zeros(t, e, dtype=torch.float64)
    routing_map = torch.zeros(t, e)
    x = logits.double()
    for i in range(t):
        if sigmoid:
            scores = torch.sigmoid(x[i])
        elif pre_softmax:
            scores = torch.softmax(x[i], -1)
        else:
            scores = x[i]
        key = scores + expert_bias.double() if expert_bias is not None else scores
        chosen = torch.topk(key, k).indices
        if sigmoid:
            w = scores[chosen] / scores[chosen].sum() if k > 1 else scores[chosen]
        elif pre_softmax:
            w = scores[chosen]
        else:
            w = torch.softmax(scores[chosen], -1)
        probs[i, chosen] = w * scaling
        routing_map[i, chosen] = 1
    return probs, routing_map


def check(module: torch.jit.ScriptModule) -> None:
    torch.manual_seed(0)
    logits = torch.randn(9, 6, dtype=torch.float64)
    bias = torch.tensor([0.0, 0.3, -0.2, 0.1, 0.0, -0.4])
    for sigmoid, pre_softmax in ((False, False), (False, True), (True, False)):
        for k in (1, 2, 3):
            for b in (None, bias):
                for scaling in (1.0, 2.5):
                    options = torch.tensor([k, sigmoid, pre_softmax, scaling, b is not None, 1], dtype=torch.float64)
                    x = logits.clone().requires_grad_()
                    indices, top, probs, routing_map, aux_scores, aux_map = module(
                        x, b if b is not None else torch.zeros(0), options)
                    s = torch.sigmoid(logits.float())
                    want_aux = s / (s.sum(1, keepdim=True) + 1e-20) if sigmoid else torch.softmax(logits.float(), -1)
                    want_aux_map = torch.zeros(9, 6).scatter(1, want_aux.topk(k, dim=1).indices, 1.0)
                    if not torch.equal(aux_scores.detach(), want_aux) or not torch.equal(aux_map, want_aux_map):
                        raise SystemExit("the load-balancing scores or their top-k map differ from their definition")
                    want_probs, want_map = reference(logits, b, k, sigmoid, pre_softmax, scaling)
                    if not torch.equal(routing_map, want_map) or not torch.allclose(probs, want_probs, atol=1e-12):
                        raise SystemExit(f"routing differs from its definition (sigmoid {sigmoid}, pre-softmax"
                                         f" {pre_softmax}, top-{k}, bias {b is not None}, scaling {scaling})")
                    if not torch.allclose(top, probs.gather(1, indices), atol=0):
                        raise SystemExit("the top-k probabilities are not the scattered ones")
                    # the gradient reaches the logits through the weights only
                    (probs * torch.arange(6.0, dtype=torch.float64)).sum().backward(retain_graph=True)
                    x.grad = None
                    aux_scores.sum().backward()
                    if x.grad is None or not torch.isfinite(x.grad).all():
                        raise SystemExit("no gradient reached the logits")
    low = torch.randn(5, 4).to(torch.bfloat16)
    _, top, probs, routing_map, aux_scores, aux_map = module(low, torch.zeros(0),
                                                             torch.tensor([2, 0, 0, 1, 0, 0], dtype=torch.float64))
    if probs.dtype != torch.bfloat16 or routing_map.dtype != torch.float32:
        raise SystemExit("the probabilities must keep the logits' dtype, the map float32")
    if aux_scores.numel() != 0 or aux_map.numel() != 0:
        raise SystemExit("without aux the load-balancing outputs must be empty")


if __name__ == "__main__":
    write_checked(TopKRouting(), check, os.path.join(sys.argv[1], "topk_routing.pt"))
