"""Draws issue 35's loss curves: pretrain-gpt's logged training loss per iteration for a bf16 run and an FP8 run
(scripts/gpu/fp8-curves.sh writes both logs), into one PNG, and prints each run's final loss (the mean of its last
three logged losses), its last validation loss where the log has one, and their relative differences.

Usage: python3 scripts/fp8/plot_curves.py BF16_LOG FP8_LOG OUT.png [--title TEXT]
"""
import argparse
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

LINE = re.compile(r"iteration\s+(\d+)/\s*\d+ \| loss ([0-9.]+)")
VALIDATION = re.compile(r"validation at iteration\s+(\d+) \| loss ([0-9.]+)")


def validation(path):
    """The last (iteration, loss) of the log's validation lines, or None."""
    last = None
    with open(path) as f:
        for line in f:
            m = VALIDATION.search(line)
            if m:
                last = (int(m.group(1)), float(m.group(2)))
    return last


def losses(path):
    points = []
    with open(path) as f:
        for line in f:
            m = LINE.search(line)
            if m:
                points.append((int(m.group(1)), float(m.group(2))))
    if not points:
        raise SystemExit(f"{path}: no 'iteration N/M | loss X' lines")
    return points


def main():
    p = argparse.ArgumentParser()
    p.add_argument("bf16")
    p.add_argument("fp8")
    p.add_argument("png")
    p.add_argument("--title", default="pretrain-gpt, 8 x 512, byte-level corpus of the checkout")
    a = p.parse_args()
    runs = {"bf16": losses(a.bf16), "FP8 hybrid (delayed scaling)": losses(a.fp8)}
    final = {}
    plt.figure(figsize=(7, 4.2))
    for name, points in runs.items():
        plt.plot([i for i, _ in points], [v for _, v in points], label=name)
        last = [v for _, v in points[-3:]]
        final[name] = sum(last) / len(last)
    plt.xlabel("iteration")
    plt.ylabel("training loss")
    plt.yscale("log")
    plt.title(a.title, fontsize=10)
    plt.legend()
    plt.grid(alpha=0.3)
    plt.tight_layout()
    plt.savefig(a.png, dpi=110)
    b, f = final["bf16"], final["FP8 hybrid (delayed scaling)"]
    print(f"final loss (mean of the last three logged): bf16 {b:.4f}, FP8 {f:.4f}, FP8/bf16 - 1 = {100 * (f / b - 1):+.2f}%")
    vb, vf = validation(a.bf16), validation(a.fp8)
    if vb and vf:
        print(f"validation loss at iteration {vb[0]}: bf16 {vb[1]:.4f}, FP8 {vf[1]:.4f} (iteration {vf[0]}),"
              f" FP8/bf16 - 1 = {100 * (vf[1] / vb[1] - 1):+.2f}%")


if __name__ == "__main__":
    main()
