#!/usr/bin/env bash
# training-step-check.sh: on a GPU host, after `source .gpu/run-on-host.sh` (see docs/gpu.md), runs in one
# call the figures the training-step issue compares: plain PyTorch eager (+ SDPA) as the reference,
# GptBenchmark --model 1.3b, and pretrain-gpt with the same model and batch on --mock-data; with
# OLD_CP set (the jars of an earlier commit, one with the same GptBenchmark flags), also that commit's benchmark; with LLAMA7B=1 (a GPU of 140 GB),
# the LLaMA-7B preset without recompute and with selective recompute. Prints each line as it comes.
#   STEPS (10) timed steps after WARMUP (3); EXTRA: more flags for both mcore4j commands.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
steps=${STEPS:-10}; warmup=${WARMUP:-3}; extra=${EXTRA:-}
java_opts="${MCORE4J_JAVA_OPTS:--Dai.djl.offline=true} -Xmx16g -Dorg.slf4j.simpleLogger.defaultLogLevel=warn"
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
echo "== eager PyTorch + SDPA (reference)"
python3 "$here/eager_gpt_bench.py" 2>&1 | grep RESULT
echo "== eager PyTorch + SDPA + torch.compile"
python3 "$here/eager_gpt_bench.py" --compile 2>&1 | grep RESULT
if [ -n "${OLD_CP:-}" ]; then
  echo "== GptBenchmark of the earlier commit"
  java $java_opts -cp "$OLD_CP" io.mcore4j.samples.bench.GptBenchmark --model 1.3b --steps "$steps" --warmup "$warmup"
fi
echo "== GptBenchmark"
java $java_opts -cp "$CP" io.mcore4j.samples.bench.GptBenchmark --model 1.3b --steps "$steps" --warmup "$warmup" $extra
echo "== pretrain-gpt, 1.3B, micro-batch 4 x 2, --mock-data (15 iterations logged every 5: the windows after the first are warm)"
java $java_opts -cp "$CP" io.mcore4j.samples.pretrain.PretrainGpt --num-layers 24 --hidden-size 2048 \
  --num-attention-heads 16 --ffn-hidden-size 8192 --seq-length 2048 --vocab-size 32768 --fp16 --mock-data \
  --micro-batch-size 4 --global-batch-size 8 --train-iters 15 --log-interval 5 --lr 1e-4 \
  --metrics-dir /tmp/pretrain-gpt-check $extra
if [ "${LLAMA7B:-0}" = 1 ]; then
  echo "== GptBenchmark --model llama7b, micro-batch 1 x 4, no recompute and selective recompute"
  java $java_opts -cp "$CP" io.mcore4j.samples.bench.GptBenchmark --model llama7b --micro-batch-size 1 --micro-batches 4 \
    --steps 5 --warmup 2 $extra
  java $java_opts -cp "$CP" io.mcore4j.samples.bench.GptBenchmark --model llama7b --micro-batch-size 1 --micro-batches 4 \
    --recompute-granularity selective --steps 5 --warmup 2 $extra
fi
