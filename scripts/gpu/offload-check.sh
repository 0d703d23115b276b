#!/usr/bin/env bash
# offload-check.sh: LLaMA-7B on one GPU with and without optimizer CPU offload (Megatron's
# --optimizer-cpu-offload), then what the freed memory buys: the micro-batch that the planner picks with
# offload (4 instead of 1, no recompute), with and without offload. Each line is GptBenchmark's report:
# tokens/s, MFU and the device memory in use. Run after `source .gpu/run-on-host.sh` (docs/gpu.md).
# OFFLOAD_FRACTION (default 1.0) is --optimizer-offload-fraction; STEPS (default 4) timed steps after 2 warm-up.
set -u
fraction=${OFFLOAD_FRACTION:-1.0}
steps=${STEPS:-4}
bench() {
  echo "== GptBenchmark --model llama7b $*"
  java $MCORE4J_JAVA_OPTS -Xmx8g -cp "$CP" io.mcore4j.samples.bench.GptBenchmark --model llama7b \
    --use-distributed-optimizer --steps "$steps" --warmup 2 "$@" 2>&1 | grep -v "^\[main\] INFO" | tail -4
}
bench --micro-batch-size 1 --micro-batches 4
bench --micro-batch-size 1 --micro-batches 4 --optimizer-cpu-offload --optimizer-offload-fraction "$fraction" --phases
bench --micro-batch-size 4 --micro-batches 1 --optimizer-cpu-offload --optimizer-offload-fraction "$fraction"
bench --micro-batch-size 4 --micro-batches 1
