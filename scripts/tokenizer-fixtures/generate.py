#!/usr/bin/env python3
"""Writes the tokenizer fixtures that pin mcore4j's tokenizers to the Python libraries' ids.

Trains a tiny byte-level BPE (400 ids, "<|endoftext|>" among them) with Hugging Face `tokenizers` on this
repository's README.md and docs/*.md, then writes into data/src/test/resources/io/mcore4j/data/tokenizer/:

  gpt2-vocab.json, gpt2-merges.txt  the model as GPT-2's two files (--tokenizer-type GPT2BPETokenizer)
  tokenizer.json                    the same model as one file (--tokenizer-type HuggingFaceTokenizer)
  expected.json                     the ids Python gives for a few texts:
      "gpt2": transformers' GPT2Tokenizer on vocab/merges with split_special_tokens=True, which is Megatron's
              GPT2BPETokenizer: it has no special tokens, so "<|endoftext|>" in a text is plain text
      "hf":   tokenizers' Tokenizer on tokenizer.json (what Megatron's HuggingFaceTokenizer gets through
              AutoTokenizer: "<|endoftext|>" in a text is the one special id)
    plus each tokenizer's vocabulary size and end-of-document id as Megatron defines them.

Usage (pip install tokenizers transformers; nothing is downloaded from the Hub):
  python3 scripts/tokenizer-fixtures/generate.py --repo .
The training text is fixed by the commit it runs on; rerunning on another commit may give other merges,
which is fine: the Java tests only compare against expected.json written together with the model.
"""
import argparse
import glob
import json
import os

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

TEXTS = [
    "Hello, world! This is mcore4j, Megatron-Core for the JVM.",
    "  two leading spaces\n\nblank line\tand a tab   trailing",
    "punctuation: (a+b)*c; x->y {}[]<>?!... 'single' \"double\" it's we'll they're I'd",
    "digits 3.14159, 2026 and 1,000,000",
    "na\u00efve caf\u00e9 \u2014 Gr\u00fc\u00dfe, \u6771\u4eac, \u041f\u0440\u0438\u0432\u0435\u0442",
    "emoji \U0001F642\U0001F680 and a joined one \U0001F469\u200d\U0001F4BB",
    "no-break\u00a0space and ideographic\u3000space",
    "vertical\x0btab, next\x85line, line\u2028separator, zero\u200bwidth",
    "<|endoftext|>",
    "end of one document<|endoftext|>the next",
    "",
]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repo", default=".")
    parser.add_argument("--vocab-size", type=int, default=400)
    args = parser.parse_args()
    out = os.path.join(args.repo, "data/src/test/resources/io/mcore4j/data/tokenizer")
    os.makedirs(out, exist_ok=True)

    files = [os.path.join(args.repo, "README.md")] + sorted(glob.glob(os.path.join(args.repo, "docs", "*.md")))
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=args.vocab_size, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train(files, trainer)
    tokenizer.save(os.path.join(out, "tokenizer.json"))
    tokenizer.model.save(out, "gpt2")  # gpt2-vocab.json, gpt2-merges.txt

    from transformers import GPT2Tokenizer
    gpt2 = GPT2Tokenizer(os.path.join(out, "gpt2-vocab.json"), os.path.join(out, "gpt2-merges.txt"),
                         split_special_tokens=True)
    hf = Tokenizer.from_file(os.path.join(out, "tokenizer.json"))
    with open(os.path.join(out, "gpt2-vocab.json"), encoding="utf-8") as f:
        encoder = json.load(f)

    cases = []
    for text in TEXTS:
        gpt2_ids = gpt2.encode(text, add_special_tokens=False)
        hf_ids = hf.encode(text).ids
        if "<|endoftext|>" not in text:
            assert gpt2_ids == hf_ids, (text, gpt2_ids, hf_ids)
        assert gpt2.decode(gpt2_ids) == text, text
        cases.append({"text": text, "gpt2": gpt2_ids, "hf": hf_ids})
    expected = {
        "gpt2": {"vocab_size": len(encoder), "eod": encoder["<|endoftext|>"]},
        "hf": {"vocab_size": hf.get_vocab_size(with_added_tokens=True), "eod": hf.token_to_id("<|endoftext|>")},
        "cases": cases,
    }
    with open(os.path.join(out, "expected.json"), "w", encoding="utf-8") as f:
        # one case a line, so that a changed id shows as a changed line
        f.write('{"gpt2": %s,\n "hf": %s,\n "cases": [\n  ' % (json.dumps(expected["gpt2"]), json.dumps(expected["hf"])))
        f.write(",\n  ".join(json.dumps(c, ensure_ascii=True) for c in cases))
        f.write("\n]}\n")
    print("wrote", out, "vocab", len(encoder), "eod", encoder["<|endoftext|>"])


if __name__ == "__main__":
    main()
