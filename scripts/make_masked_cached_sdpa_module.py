"""Writes the TorchScript archive that mcore4j-inference's CachedAttention loads for layers with a sliding window.

The module is mcore4j's own: the attention of make_cached_layer_module.py's static form on its own (attend_static):
a generation pass's queries [s, b, heads, d] over the whole key and value caches [b, groups, max_len, d] under a
mask. It writes the pass's keys and values [s, b, groups, d] at `positions` [s] (int64, on the caches' device)
and attends with `allowed` [s, max_len] (bool: query i attends position j iff allowed[i, j]), which the caller
makes causal and limited to the layer's window. Returns the context [s, b, heads * d].

Usage: python3 scripts/make_masked_cached_sdpa_module.py \
    inference/src/main/resources/io/mcore4j/inference/torchscript/masked_cached_sdpa.pt
"""
import sys

import torch

from make_cached_layer_module import attend_static


class MaskedCachedSdpa(torch.nn.Module):
    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor,
                value_cache: torch.Tensor, positions: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        return attend_static(query, key, value, key_cache, value_cache, positions, allowed)


def main(path: str) -> None:
    torch.jit.script(MaskedCachedSdpa()).save(path)
    print(f"wrote {path} with torch {torch.__version__}")


if __name__ == "__main__":
    main(sys.argv[1])
