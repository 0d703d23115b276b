#!/usr/bin/env bash
# fp8-curves.sh (issue 35, "a small model trained 300 steps on real text ends within 1% of bf16's loss"): on a GPU
# host after `source .gpu/run-on-host.sh` (docs/gpu.md; CP holds mcore4j's jars), trains the same small GPT twice
# with pretrain-gpt, --bf16 and --bf16 --fp8-format hybrid, on real text: the checkout's own source and documentation
# files as a byte-level corpus (--corpus-from-sources, vocabulary 257), 8 layers x hidden 512, 8 heads, sequence 512,
# micro-batch 8, global batch 32, 300 iterations (~4.9M tokens), cosine learning rate 1e-3 -> 1e-4 after 30 warm-up
# iterations, the loss logged every 10, the validation loss (16 global batches of the held-out 3%) every 100. Each run has its own working directory (its own copy of the corpus) and, with
# two or more GPUs, its own GPU, so the two run at once. Writes OUT_DIR/bf16.log and OUT_DIR/fp8.log;
# scripts/fp8/plot_curves.py OUT_DIR/bf16.log OUT_DIR/fp8.log PNG draws the two curves and prints the final losses.
# SEED (1234) seeds both runs (initialisation and data order).
#   scripts/gpu/fp8-curves.sh OUT_DIR
set -euo pipefail
out="${1:?usage: fp8-curves.sh OUT_DIR}"
: "${CP:?set CP to the runtime class path of mcore4j-samples}"
repo="$(cd "$(dirname "$0")/../.." && pwd)"
mkdir -p "$out"
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
train() { # NAME GPU FLAGS...
  local name=$1 gpu=$2; shift 2
  mkdir -p "$out/$name.run"
  # shellcheck disable=SC2086
  (cd "$out/$name.run" && CUDA_VISIBLE_DEVICES=$gpu "${JAVA_HOME:+$JAVA_HOME/bin/}java" -Xmx16g ${MCORE4J_JAVA_OPTS:-} \
    -cp "$CP" io.mcore4j.samples.cli.Mcore4jCli pretrain-gpt --corpus-from-sources "$repo" --vocab-size 257 \
    --num-layers 8 --hidden-size 512 --num-attention-heads 8 --seq-length 512 --max-position-embeddings 512 \
    --micro-batch-size 8 --global-batch-size 32 --lr 1e-3 --min-lr 1e-4 --lr-warmup-iters 30 --lr-decay-style cosine \
    --train-iters 300 --log-interval 10 --eval-interval 100 --eval-iters 16 --seed "${SEED:-1234}" --bf16 "$@") >"$out/$name.log" 2>&1
}
second=$(( gpus > 1 ? 1 : 0 ))
train bf16 0 &
first=$!
[ "$second" = 0 ] && wait $first
train fp8 "$second" --fp8-format hybrid
wait $first || true
grep -h "iteration *300/" "$out/bf16.log" "$out/fp8.log" || { tail -5 "$out/bf16.log" "$out/fp8.log"; exit 1; }
