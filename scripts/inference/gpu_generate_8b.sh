#!/usr/bin/env bash
# Issue 41's 8B row: the continuous-batching engine on Llama-3-8B's shape (random fp16 weights from
# gpu_generate_bench.py with BENCH_SHAPE=8b), greedy, 32-token prompts, 128 new tokens at batch 1 and 16, at TP1 on
# GPU 0 and at TP2 on GPUs 0 and 1 (one process per GPU under torchrun). Decode steps replay CUDA graphs at both
# sizes (at TP2 with their all-reduces and the logits' all-gather inside); NO_CUDA_GRAPHS=1 runs them eagerly instead.
# Needs CP and java as gpu_generate_bench.sh (on the host: `source .gpu/run-on-host.sh`); EXTRA_JAVA_OPTS go to each JVM.
#   scripts/inference/gpu_generate_8b.sh [WORK_DIR]
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
WORK="${1:-/tmp/mcore4j-generate-8b}"
: "${CP:?set CP to the runtime class path of mcore4j-samples}"
[ -f "$WORK/mcore4j.safetensors" ] || BENCH_SHAPE=8b python3 "$HERE/gpu_generate_bench.py" make "$WORK"
shape=(--weights "$WORK/mcore4j.safetensors" --prompts "$WORK/prompts.json" --num-layers 32 --hidden-size 4096
       --num-attention-heads 32 --num-query-groups 8 --ffn-hidden-size 14336 --vocab-size 128256 --rotary-base 500000
       --batch-sizes 1,16 --num-tokens-to-generate 128 --engine --max-model-len 512)
[ "${NO_CUDA_GRAPHS:-0}" = 1 ] && shape+=(--no-cuda-graphs)
echo "== 8B, TP1 (GPU 0)"
# shellcheck disable=SC2086
CUDA_VISIBLE_DEVICES=0 java -Xmx16g ${EXTRA_JAVA_OPTS:-} -cp "$CP" io.mcore4j.samples.generate.GenerateBenchmark "${shape[@]}"
echo "== 8B, TP2 (GPUs 0 and 1)"
# shellcheck disable=SC2086
CUDA_VISIBLE_DEVICES=0,1 NCCL_NVLS_ENABLE=0 torchrun --standalone --nproc_per_node=2 --no-python \
  java -Xmx16g ${EXTRA_JAVA_OPTS:-} -cp "$CP" io.mcore4j.samples.generate.GenerateBenchmark "${shape[@]}" \
  --tensor-model-parallel-size 2
