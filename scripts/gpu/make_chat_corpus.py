"""Writes a synthetic chat corpus for fine-tuning benchmarks: JSON Lines of {"messages": [...]}, one
conversation per line, of mixed lengths (a system prompt sometimes, 1 to 4 user/assistant turns, each turn
a log-uniform number of words between 5 and --max-words), made of pseudo-words from a fixed syllable list.
Deterministic for a seed. Usage: python3 make_chat_corpus.py OUT.jsonl [--conversations 2000] [--seed 0]
"""
import argparse
import json
import math
import random

p = argparse.ArgumentParser()
p.add_argument("out")
p.add_argument("--conversations", type=int, default=2000)
p.add_argument("--max-words", type=int, default=600)
p.add_argument("--seed", type=int, default=0)
a = p.parse_args()

SYLLABLES = ["ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ze", "pa", "do", "gu", "he", "ji", "bo", "fe", "qua",
             "ri", "so", "tu", "an", "el", "in", "or", "um"]
rng = random.Random(a.seed)
vocab = ["".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 3))) for _ in range(3000)]


def text():
    n = int(math.exp(rng.uniform(math.log(5), math.log(a.max_words))))
    words = [rng.choice(vocab) for _ in range(n)]
    return " ".join(words).capitalize() + "."


with open(a.out, "w") as f:
    for _ in range(a.conversations):
        messages = []
        if rng.random() < 0.3:
            messages.append({"role": "system", "content": text()})
        for _ in range(rng.randint(1, 4)):
            messages.append({"role": "user", "content": text()})
            messages.append({"role": "assistant", "content": text()})
        f.write(json.dumps({"messages": messages}) + "\n")
print(f"wrote {a.conversations} conversations to {a.out}")
