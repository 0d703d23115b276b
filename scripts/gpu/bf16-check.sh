#!/usr/bin/env bash
# bf16-check.sh: on a GPU host, after `source .gpu/run-on-host.sh` (see docs/gpu.md; CP holds mcore4j's
# jars), runs in one call the figures issue 19 compares on one GPU: eager PyTorch with bf16 autocast,
# GptBenchmark --model 1.3b in fp16 (its default), and GptBenchmark --model 1.3b --bf16; then a short
# pretrain-gpt --bf16 run of the same model that must log finite, falling losses with loss scale 1.
# Goal: --bf16 within 2% of the fp16 tokens/s and ahead of eager bf16.
#   STEPS (10) timed steps after WARMUP (3); EXTRA: more flags for the mcore4j commands (e.g. --phases).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
steps=${STEPS:-10}; warmup=${WARMUP:-3}; extra=${EXTRA:-}
java_opts="${MCORE4J_JAVA_OPTS:--Dai.djl.offline=true} -Xmx16g -Dorg.slf4j.simpleLogger.defaultLogLevel=warn"
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
echo "== eager PyTorch + SDPA, bf16 autocast (reference)"
python3 "$here/eager_bf16_gpt_bench.py" --steps "$steps" --warmup "$warmup" 2>&1 | grep -v Warning
echo "== GptBenchmark fp16"
java $java_opts -cp "$CP" io.mcore4j.samples.bench.GptBenchmark --model 1.3b --steps "$steps" --warmup "$warmup" $extra
echo "== GptBenchmark bf16"
java $java_opts -cp "$CP" io.mcore4j.samples.bench.GptBenchmark --model 1.3b --bf16 --steps "$steps" --warmup "$warmup" $extra
echo "== GptBenchmark fp16 again (run-to-run spread)"
java $java_opts -cp "$CP" io.mcore4j.samples.bench.GptBenchmark --model 1.3b --steps "$steps" --warmup "$warmup" $extra
echo "== pretrain-gpt --bf16, 1.3B, micro-batch 4 x 2, --mock-data, 15 iterations"
java $java_opts -cp "$CP" io.mcore4j.samples.pretrain.PretrainGpt --num-layers 24 --hidden-size 2048 \
  --num-attention-heads 16 --ffn-hidden-size 8192 --seq-length 2048 --vocab-size 32768 --bf16 --mock-data \
  --micro-batch-size 4 --global-batch-size 8 --train-iters 15 --log-interval 5 --lr 1e-4 \
  --metrics-dir /tmp/pretrain-gpt-bf16-check $extra
