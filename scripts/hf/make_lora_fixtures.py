#!/usr/bin/env python3
"""Makes the PEFT references of hf-bridge's LoRA export test (HfLoraExportTest): for each adapter
mcore4j exported in PEFT's format (hf-bridge/src/test/resources/hf/<name>-lora/: adapter_config.json,
adapter_model.safetensors, written by that test with -Dmcore4j.writeLoraFixtures=DIR), Python peft
loads it onto the base fixture (hf/<name>) with PeftModel.from_pretrained and the float32 logits of
the fixture's prompt are written to hf/<name>-lora/peft_logits.json. The script also checks that
peft's merge_and_unload gives the same logits, and that every adapter tensor was used (peft warns
about none missing or unexpected).

Run from the repository root:  /tmp/venv-lora/bin/python scripts/hf/make_lora_fixtures.py
(pip install torch transformers safetensors peft).
"""
import json
import os
import sys

import peft
import torch
import transformers
from peft import PeftModel
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

ROOT = os.path.join("hf-bridge", "src", "test", "resources", "hf")


def main():
    for name in ["llama", "qwen2"]:
        base_dir = os.path.join(ROOT, name)
        adapter_dir = os.path.join(ROOT, name + "-lora")
        with open(os.path.join(base_dir, "logits.json")) as f:
            prompt = json.load(f)["input_ids"]
        base = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32).eval()
        model = PeftModel.from_pretrained(base, adapter_dir).eval()
        # every stored tensor reached a LoRA module of the model (a wrong key would leave lora_B at zero)
        stored = load_file(os.path.join(adapter_dir, "adapter_model.safetensors"))
        state = {k.replace(".default", ""): v for k, v in model.state_dict().items() if "lora_" in k}
        assert set(stored) == set(state), (set(stored) ^ set(state))
        for k, v in stored.items():
            assert torch.equal(state[k].float(), v.float()), k
        with torch.no_grad():
            logits = model(torch.tensor([prompt])).logits[0]
            merged = model.merge_and_unload()(torch.tensor([prompt])).logits[0]
        assert torch.allclose(logits, merged, atol=1e-5), (logits - merged).abs().max()
        with open(os.path.join(adapter_dir, "peft_logits.json"), "w") as f:
            json.dump({"input_ids": prompt, "transformers": transformers.__version__, "peft": peft.__version__,
                       "logits": [[float(v) for v in row] for row in logits]}, f)
            f.write("\n")
        print(name, "peft logits[0][:3]", [round(float(v), 5) for v in logits[0][:3]])


if __name__ == "__main__":
    sys.exit(main())
