"""Writes the TorchScript archive that mcore4j-inference's CachedAttention loads.

The module is mcore4j's own: attention of a generation step's queries over a key/value cache through
scaled_dot_product_attention. Inputs are queries [s, b, heads, d], the step's keys and values
[s, b, groups, d], and views [b, groups, L, d] of the key and value caches over positions 0..L-1; the
module writes the step's keys and values into the last s positions of the views (in place, so into the
caches) and returns the context [s, b, heads * d]. Query i of the step sits at position L - s + i and
attends to positions 0..L-s+i: a plain causal mask for a first pass (s == L), none for a single new
token (s == 1), an explicit one otherwise. Grouped-query attention uses SDPA's enable_gqa, so the cache
is never repeated per head. libtorch picks its fused kernel for the device and dtype at run time.

Usage: python3 scripts/make_cached_sdpa_module.py inference/src/main/resources/io/mcore4j/inference/torchscript/cached_sdpa.pt
"""
import sys

import torch
import torch.nn.functional as F


def attend_cached(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                  key_cache: torch.Tensor, value_cache: torch.Tensor) -> torch.Tensor:
    """Writes the step's keys and values into the last s positions of the cache views and attends."""
    s = query.size(0)
    b = query.size(1)
    heads = query.size(2)
    d = query.size(3)
    length = key_cache.size(2)
    key_cache.narrow(2, length - s, s).copy_(key.permute(1, 2, 0, 3))
    value_cache.narrow(2, length - s, s).copy_(value.permute(1, 2, 0, 3))
    q = query.permute(1, 2, 0, 3)
    gqa = key_cache.size(1) != heads
    if s == 1:
        out = F.scaled_dot_product_attention(q, key_cache, value_cache, enable_gqa=gqa)
    elif s == length:
        out = F.scaled_dot_product_attention(q, key_cache, value_cache, is_causal=True, enable_gqa=gqa)
    else:
        allowed = torch.ones(s, length, dtype=torch.bool, device=query.device).tril(length - s)
        out = F.scaled_dot_product_attention(q, key_cache, value_cache, attn_mask=allowed, enable_gqa=gqa)
    return out.permute(2, 0, 1, 3).reshape(s, b, heads * d)


class CachedSdpa(torch.nn.Module):
    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                key_cache: torch.Tensor, value_cache: torch.Tensor) -> torch.Tensor:
        return attend_cached(query, key, value, key_cache, value_cache)


def main(path: str) -> None:
    module = torch.jit.script(CachedSdpa())
    module.save(path)
    print(f"wrote {path} with torch {torch.__version__}")


if __name__ == "__main__":
    main(sys.argv[1])
