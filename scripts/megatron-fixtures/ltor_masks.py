#!/usr/bin/env python3
"""Writes the fixture that pins GptBatches' end-of-document handling to Megatron's semantics.

Megatron-LM's get_ltor_masks_and_position_ids (megatron/core/datasets/gpt_dataset.py) derives, from a
sample's input tokens and the end-of-document id, with --reset-position-ids, --reset-attention-mask and
--eod-mask-loss all on:
  - the loss mask: 1, and 0 wherever the input token is the EOD;
  - the position ids: 0..s-1, and after each EOD at index i everything after it lowered by the length of
    the document that EOD ends (i + 1 - the previous document's start), so positions restart at 0;
  - the attention mask: causal (lower triangle), and for each EOD at index i the queries after it may not
    see the keys up to and including it; Megatron returns it as "masked" booleans (True = may not attend).
This is a plain-Python re-statement of those documented rules (no Megatron or torch code): the same loop
over the EOD indices, in order, with the same slices.

Usage: python3 scripts/megatron-fixtures/ltor_masks.py training/src/test/resources/io/mcore4j/training/gpt/ltor_masks.json
"""
import json
import sys

EOD = 0
SEQ = 16


def ltor_masks_and_position_ids(data, eod):
    s = len(data)
    keep = [[1.0 if k <= q else 0.0 for k in range(s)] for q in range(s)]
    loss_mask = [0.0 if t == eod else 1.0 for t in data]
    position_ids = list(range(s))
    eod_index = [i for i in range(s) if data[i] == eod]
    prev_index = 0
    for i in eod_index:
        for q in range(i + 1, s):
            for k in range(0, i + 1):
                keep[q][k] = 0.0
        for t in range(i + 1, s):
            position_ids[t] -= i + 1 - prev_index
        prev_index = i + 1
    masked = [[v < 0.5 for v in row] for row in keep]
    return masked, loss_mask, position_ids


def samples():
    """Windows of SEQ + 1 tokens (inputs are the first SEQ): EODs inside, consecutive, first, last, past the end, none."""
    def window(eods):
        return [EOD if i in eods else 1 + (i * 5) % 11 for i in range(SEQ + 1)]
    return [window({3, 4, 10}), window({0, 15, 16}), window(set()), window({7}), window({1, 2, 3, 14})]


def main(path):
    out = {"eod": EOD, "seq_length": SEQ, "samples": []}
    for text in samples():
        tokens = text[:-1]
        masked, loss_mask, position_ids = ltor_masks_and_position_ids(tokens, EOD)
        out["samples"].append({"text": text, "attention_mask": masked, "loss_mask": loss_mask,
                               "position_ids": position_ids})
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main(sys.argv[1])
