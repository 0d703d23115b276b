"""Writes the TorchScript archive that mcore4j's SdpaAttention loads.

The module is mcore4j's own: causal scaled-dot-product attention over [batch, heads, seq, dim]
queries and [batch, groups, seq, dim] keys/values (grouped-query attention when groups < heads).
libtorch picks its fused kernel (flash or memory-efficient) for the device and dtype at run time.

Usage: python3 scripts/make_sdpa_module.py models/src/main/resources/io/mcore4j/models/torchscript/causal_sdpa.pt
"""
import sys

import torch
import torch.nn.functional as F


class CausalSdpa(torch.nn.Module):
    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        heads = query.size(1)
        groups = key.size(1)
        if groups != heads:
            key = key.repeat_interleave(heads // groups, dim=1)
            value = value.repeat_interleave(heads // groups, dim=1)
        return F.scaled_dot_product_attention(query, key, value, is_causal=True)


def main(path: str) -> None:
    module = torch.jit.script(CausalSdpa())
    module.save(path)
    print(f"wrote {path} with torch {torch.__version__}")


if __name__ == "__main__":
    main(sys.argv[1])
