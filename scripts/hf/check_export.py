#!/usr/bin/env python3
"""Loads directories exported by mcore4j's HfExport with transformers (from_pretrained, CPU, float32)
and compares their logits for the fixture's prompt with the logits transformers computed from the
original checkpoint (the fixture's logits.json). Exits 1 if any differs by more than --tolerance of
the logits' scale (max |a - b| / max |b|).

  python scripts/hf/check_export.py hf-bridge/target/hf-export/llama-bf16=hf-bridge/src/test/resources/hf/llama ...

Each argument is EXPORT_DIR=FIXTURE_DIR. With no arguments, every hf-bridge/target/hf-export/<name>-<dtype>
written by HfExportTest is checked against hf-bridge/src/test/resources/hf/<name> (and those of HfForModelTest,
models mcore4j initialised itself, against the logits.json mcore4j wrote beside them before export); exports in a dtype
that rounds the original weights (bf16 of an fp16/fp32 fixture) are reported but held to --lossy-tolerance.
"""
import argparse
import glob
import json
import os
import sys

import torch
import transformers
from transformers import AutoModelForCausalLM
from safetensors import safe_open

FIXTURES = os.path.join("hf-bridge", "src", "test", "resources", "hf")
EXPORTS = os.path.join("hf-bridge", "target", "hf-export")


def stored_dtype(directory):
    files = sorted(glob.glob(os.path.join(directory, "*.safetensors")))
    with safe_open(files[0], "pt") as f:
        return f.get_slice(next(iter(f.keys()))).get_dtype()


def check(export_dir, fixture_dir, tolerance):
    with open(os.path.join(fixture_dir, "logits.json")) as f:
        reference = json.load(f)
    model = AutoModelForCausalLM.from_pretrained(os.path.abspath(export_dir), dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(torch.tensor([reference["input_ids"]])).logits[0]
    expected = torch.tensor(reference["logits"])
    error = float((logits - expected).abs().max() / expected.abs().max())
    ok = error <= tolerance
    print(f"{'OK  ' if ok else 'FAIL'} {export_dir} ({type(model).__name__}, stored {stored_dtype(export_dir)}) "
          f"vs {fixture_dir}: logits relative error {error:.3g} (tolerance {tolerance:g})")
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pairs", nargs="*", help="EXPORT_DIR=FIXTURE_DIR")
    parser.add_argument("--tolerance", type=float, default=1e-4)
    parser.add_argument("--lossy-tolerance", type=float, default=5e-2)
    args = parser.parse_args()
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    pairs = [p.split("=", 1) for p in args.pairs]
    lossy = set()
    if not pairs:
        for export in sorted(glob.glob(os.path.join(EXPORTS, "*-*"))):
            name, dtype = os.path.basename(export).rsplit("-", 1)
            # a model mcore4j made itself (HfForModelTest) carries its own logits from before export
            fixture = export if os.path.exists(os.path.join(export, "logits.json")) else os.path.join(FIXTURES, name)
            pairs.append((export, fixture))
            if dtype == "bf16" and stored_dtype(fixture) != "BF16":
                lossy.add(export)
    if not pairs:
        print("nothing to check: run HfExportTest first (mvn -pl hf-bridge verify)")
        return 1
    ok = all([check(e, f, args.lossy_tolerance if e in lossy else args.tolerance) for e, f in pairs])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
