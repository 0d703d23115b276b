#!/usr/bin/env bash
# planner-check.sh: on a GPU host, after `source .gpu/run-on-host.sh` (see docs/gpu.md), measures the one-GPU
# figures the planner (#26) is checked against and prints the planner's estimate for each exact run beside it:
#   1.3B TP1 micro-batch 4 x 2 (the calibration's anchor), micro-batch 2 x 4 and 8 x 1 (predictions), and
#   LLaMA-7B selective recompute micro-batch 1 x 4 (a prediction for memory; its MFU is a calibration point).
# Each run also writes a calibration (GptBenchmark --calibration-out, with --phases) into $OUT (/tmp/planner-check);
# the last `plan` re-plans the 4-GPU 1.3B job with the 1.3B calibration measured here.
# GPU memory is what the driver reports in use (the figure the planner's estimate includes a device overhead for).
# With ALLOCATED=1 each benchmark also runs with PYTORCH_NO_CUDA_MEMORY_CACHING=1 --sample-memory: its peak is close
# to the allocated bytes, to compare with the estimate less its "overhead" term.
set -uo pipefail
out=${OUT:-/tmp/planner-check}; mkdir -p "$out"
steps=${STEPS:-10}; warmup=${WARMUP:-3}
gpu=${GPU:-h200}
java_opts="${MCORE4J_JAVA_OPTS:--Dai.djl.offline=true} -Xmx16g -Dorg.slf4j.simpleLogger.defaultLogLevel=warn"
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
bench() { java $java_opts -cp "$CP" io.mcore4j.samples.bench.GptBenchmark --steps "$steps" --warmup "$warmup" "$@"; }
plan() { java $java_opts -cp "$CP" io.mcore4j.samples.pretrain.PlanLayouts --gpu "$gpu" --gpus-per-node 1 "$@" | grep -v '^   flags'; }
run() { # name, benchmark flags (the plan gets the same model flags and the matching global batch)
  local name=$1 mbs=$2 micro=$3; shift 3
  echo "== $name: measured"
  bench "$@" --micro-batch-size "$mbs" --micro-batches "$micro" --phases --calibration-out "$out/$name.json"
  if [ "${ALLOCATED:-0}" = 1 ]; then
    echo "== $name: measured with PYTORCH_NO_CUDA_MEMORY_CACHING=1 --sample-memory (about the allocated bytes)"
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 bench "$@" --micro-batch-size "$mbs" --micro-batches "$micro" --sample-memory --steps 3 --warmup 1
  fi
  echo "== $name: estimated"
  plan "$@" --micro-batch-size "$mbs" --global-batch-size $((mbs * micro)) --evaluate
}
run gpt1_3b-mb4 4 2 --model 1.3b
run gpt1_3b-mb2 2 4 --model 1.3b
run gpt1_3b-mb8 8 1 --model 1.3b
run llama7b-selective 1 4 --model llama7b --recompute-granularity selective
echo "== the 4-GPU 1.3B plan with the 1.3B calibration measured here"
java $java_opts -cp "$CP" io.mcore4j.samples.pretrain.PlanLayouts --model 1.3b --global-batch-size 32 --gpus-per-node 4 \
  --calibration "$out/gpt1_3b-mb4.json" --top 3
