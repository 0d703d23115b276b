#!/usr/bin/env bash
# Acceptance 3 of issue 17 on one GPU: a LLaMA-shaped random model of ~1.1B parameters (TinyLlama's
# shape: 22 layers, hidden 2048, ffn 5632, 32 heads, 4 KV groups, vocab 32000) saved by transformers
# in bf16 is imported into mcore4j, fine-tuned a few steps, exported back in bf16 and loaded by
# transformers; prints the import and export times and the logits check. Steps 2 and 4 time the
# bridge alone (convert-hf / export-hf through a mcore4j checkpoint); step 3 is the one-command
# fine-tune (pretrain-gpt prints ' imported ... in X s' and ' exported ... in X s').
#
# Needs: python with torch + transformers (+ safetensors); $CP = mcore4j's runtime classpath with a
# CUDA libtorch for DJL (see ../shared/gpu/README.md, host-env.sh / pack-runtime.sh); torchrun.
# Usage:  CP=... scripts/hf/gpu_roundtrip.sh [WORK_DIR]     (default WORK_DIR: runs/hf-gpu)
set -euo pipefail
: "${CP:?set CP to the runtime classpath (samples + hf-bridge jars and a CUDA libtorch for DJL)}"
PY=${PYTHON:-python}
W=${1:-runs/hf-gpu}
STEPS=${STEPS:-5}
JAVA="java -Xmx32g -Dai.djl.offline=true -Dorg.slf4j.simpleLogger.defaultLogLevel=warn -cp $CP"
ONE_GPU="torchrun --standalone --nproc_per_node=1 --no-python"
mkdir -p "$W"

echo "== 1. transformers makes the random 1.1B LLaMA in bf16: $W/hf-in"
$PY - "$W/hf-in" <<'PYEOF'
import sys, time, json, torch
from transformers import LlamaConfig, LlamaForCausalLM
out = sys.argv[1]
torch.manual_seed(0)
c = LlamaConfig(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=22,
                num_attention_heads=32, num_key_value_heads=4, max_position_embeddings=2048, rms_norm_eps=1e-5,
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, tie_word_embeddings=False)
t = time.time()
m = LlamaForCausalLM(c).to(torch.bfloat16)
m.save_pretrained(out)
n = sum(p.numel() for p in m.parameters())
ids = torch.arange(1, 65).reshape(1, 64) * 37 % 32000
with torch.no_grad():
    logits = m.float()(ids).logits[0]
json.dump({"input_ids": ids[0].tolist(), "logits": logits.tolist()}, open(out + "/logits.json", "w"))
print(f"made {n/1e9:.3f}B parameters in {time.time()-t:.1f} s")
PYEOF

echo "== 2. import at TP1 on the GPU and save as an mcore4j checkpoint (convert-hf): $W/mcore4j"
$ONE_GPU $JAVA io.mcore4j.samples.hf.ConvertHf --load-hf "$W/hf-in" --save "$W/mcore4j" --make-vocab-size-divisible-by 128

echo "== 3. pretrain-gpt --load-hf: import on the GPU, fine-tune $STEPS steps (fp32 weights, mock tokens < 32000), --save-hf bf16: $W/hf-tuned"
$JAVA io.mcore4j.samples.pretrain.PretrainGpt --load-hf "$W/hf-in" --save-hf "$W/hf-tuned" --save-hf-dtype bf16 \
  --mock-data --seq-length 512 --micro-batch-size 4 --global-batch-size 4 --train-iters "$STEPS" \
  --lr 1e-5 --min-lr 1e-5 --lr-warmup-iters 0 --log-interval 1 --eval-interval 0 --metrics-dir "$W/metrics"
TUNED="$W/hf-tuned"

echo "== 4. export the imported weights back to Hugging Face bf16 (export-hf): $W/hf-out"
$ONE_GPU $JAVA io.mcore4j.samples.hf.ExportHf --load "$W/mcore4j" --save-hf "$W/hf-out" --dtype bf16

echo "== 5. transformers loads the export(s)"
$PY - "$W" "$TUNED" <<'PYEOF'
import sys, json, time, torch
from transformers import AutoModelForCausalLM
w, tuned = sys.argv[1], sys.argv[2]
ref = json.load(open(w + "/hf-in/logits.json"))
ids = torch.tensor([ref["input_ids"]])
t = time.time()
m = AutoModelForCausalLM.from_pretrained(w + "/hf-out", dtype=torch.float32).eval()
with torch.no_grad():
    logits = m(ids).logits[0]
expected = torch.tensor(ref["logits"])
err = float((logits - expected).abs().max() / expected.abs().max())
print(f"hf-out: {type(m).__name__} loaded in {time.time()-t:.1f} s; logits vs the original: relative error {err:.3g}"
      f" (bf16 -> fp32 import -> bf16 export is lossless: expect 0)")
if tuned:
    m = AutoModelForCausalLM.from_pretrained(tuned, dtype=torch.float32).eval()
    with torch.no_grad():
        out = m(ids, labels=ids)
    print(f"hf-tuned: {type(m).__name__} loaded; loss on the probe {float(out.loss):.4f}; "
          f"max |logit change| after fine-tuning {float((out.logits[0] - expected).abs().max()):.4g}")
PYEOF
