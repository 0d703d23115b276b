#!/usr/bin/env bash
# finetune-check.sh: on a one-GPU host, after `source .gpu/run-on-host.sh` (docs/gpu.md; CP holds mcore4j's jars),
# runs in one call issue 37's fine-tuning benchmark: LoRA on an 8B LLaMA shape with random bf16 weights made by
# transformers, on a synthetic chat corpus of mixed lengths, against transformers + peft on the same data.
#  1. the corpus (make_chat_corpus.py) and the model (peft_finetune_bench.py --make-model: Llama-3-8B's shape,
#     random weights, safetensors in $W/llama8b);
#  2. transformers + peft LoRA (peft_finetune_bench.py): padded batches, SDPA; padding-free where flash-attn is
#     installed;
#  3. mcore4j pretrain-gpt --load-hf --sft --peft lora: packed (--packing) and padded (one conversation per
#     sample), and full fine-tuning packed (optimizer state on the host: --use-distributed-optimizer
#     --optimizer-cpu-offload --optimizer-offload-fraction 0.5; one GPU does not hold 8B parameters with all of
#     Adam's state beside them).
# The chat template and tokenizer are the tiny Llama 3.2 fixture's (data/src/test/resources/io/mcore4j/data/chat/
# llama): ids stay below 128256, so the model's shape, not the tokenizer, sets the cost. tokens/s counts the
# conversations' tokens only: mcore4j's logged tokens/s (every position of every sample) times the share of
# positions that hold conversation tokens, which the SFT dataset prints when it is built.
#   W (/tmp/finetune-check), STEPS (8) timed iterations after WARMUP (2), SEQ (4096), GBS (8 sequences per
#   iteration for mcore4j, micro-batch 1), PEFT_MBS ("2 1"), RANK (16), ALPHA (32), EXTRA (more pretrain-gpt flags),
#   RUN_TIMEOUT_S (170) for each mcore4j run
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
W=${W:-/tmp/finetune-check}; steps=${STEPS:-8}; warmup=${WARMUP:-2}; seq=${SEQ:-4096}; gbs=${GBS:-8}
rank=${RANK:-16}; alpha=${ALPHA:-32}; extra=${EXTRA:-}
tok=$root/data/src/test/resources/io/mcore4j/data/chat/llama
java_opts="${MCORE4J_JAVA_OPTS:--Dai.djl.offline=true} -Xmx16g -Dorg.slf4j.simpleLogger.defaultLogLevel=warn"
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
mkdir -p "$W"

echo "== 1. corpus and model"
python3 "$here/make_chat_corpus.py" "$W/chats.jsonl" --conversations 2000 --max-words 300
[ -f "$W/llama8b/config.json" ] && make="" || make="--make-model"
# PEFT_MBS: the reference's micro-batches, each tried in turn (4 conversations of up to 4k tokens and a 128k
# vocabulary's logits run one H200 out of memory); the model is made on the first
for mbs in ${PEFT_MBS:-2 1}; do
  echo "== 2. transformers + peft LoRA (rank $rank, alpha $alpha), micro-batch $mbs"
  python3 "$here/peft_finetune_bench.py" --model "$W/llama8b" $make --data "$W/chats.jsonl" --tokenizer "$tok" \
    --seq-length "$seq" --micro-batch-size "$mbs" --steps "$steps" --warmup "$warmup" --lora-rank "$rank" \
    --lora-alpha "$alpha" 2>&1 | grep -E "^(made|RESULT|[0-9]+ conversations)|Error" | tail -6
  make=""
done

# mcore4j NAME FLAGS...: pretrain-gpt on the corpus; prints the mean logged tokens/s over the timed iterations, the
# conversation share the dataset printed, their product, ms per iteration and the last device memory
mcore4j() {
  local name=$1; shift
  local log=$W/$name.log
  # shellcheck disable=SC2086 # java_opts and extra are flag lists
  timeout -k 10 "${RUN_TIMEOUT_S:-170}" java $java_opts -cp "$CP" io.mcore4j.samples.pretrain.PretrainGpt --load-hf "$W/llama8b" --sft \
    --data-path "$W/chats.jsonl" --split 100,0,0 --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$tok" \
    --seq-length "$seq" --micro-batch-size 1 --global-batch-size "$gbs" --train-iters $((warmup + steps)) --lr 1e-4 \
    --min-lr 1e-4 --lr-warmup-iters 0 --bf16 --log-interval 1 --eval-interval 0 --data-cache-path "$W/cache" \
    "$@" $extra >"$log" 2>&1
  local code=$?
  awk -v name="$name" -v warmup="$warmup" '
    /conversation tokens/ && match($0, /[0-9.]+% of/) { share = substr($0, RSTART, RLENGTH - 4) / 100 }
    / iteration / && match($0, /iteration +[0-9]+/) {
      it = substr($0, RSTART + 10, RLENGTH - 10) + 0
      if (it <= warmup) next
      if (match($0, /\| [0-9.]+ tokens\/s/)) { tps += substr($0, RSTART + 2, RLENGTH - 11); n++ }
      if (match($0, /[0-9.]+ ms\/iter/)) ms = substr($0, RSTART, RLENGTH - 8)
      if (match($0, /device memory [0-9.]+ GiB/)) mem = substr($0, RSTART + 14, RLENGTH - 18)
      if (match($0, /loss [0-9.]+/)) loss = substr($0, RSTART + 5, RLENGTH - 5)
    }
    END {
      if (!n) { print "RESULT mcore4j-" name " failed (see its log)"; exit }
      printf "RESULT mcore4j-%s tokens/s=%.0f (logged %.0f x conversation share %s) step=%sms loss=%s device=%sGiB\n",
        name, tps / n * (share ? share : 1), tps / n, (share ? share : "unknown"), ms, loss, mem
    }' "$log"
  if [ "$code" -ne 0 ]; then
    grep -iE "out of memory|exception|error" "$log" | head -3 | sed "s/^/  $name | /"
  fi
}
echo "== 3. mcore4j pretrain-gpt --load-hf --sft, micro-batch 1, global batch $gbs"
mcore4j lora-packed --peft lora --lora-rank "$rank" --lora-alpha "$alpha" --packing
mcore4j lora-padded --peft lora --lora-rank "$rank" --lora-alpha "$alpha"
mcore4j full-packed --packing --use-distributed-optimizer --optimizer-cpu-offload --optimizer-offload-fraction 0.5
