#!/usr/bin/env bash
# long-sequence-check.sh: on a one-GPU host, after `source .gpu/run-on-host.sh` (see docs/gpu.md), runs in
# one call what the context-parallelism issue (20, acceptance 3) compares on a single GPU:
#  1. CP=1 costs nothing: GptBenchmark --model 1.3b at this commit, and with OLD_CP set (the runtime jars
#     of the commit before context parallelism, 83f2db5) that commit's, same flags, same call;
#  2. the longest sequence the 1.3B model trains at on this GPU: for each length in LENGTHS, micro-batch 1
#     and one micro-batch per step (the tokens of a step grow with the length), first without recompute,
#     and if that does not fit with --recompute-granularity full (uniform, one layer per group); each beside plain PyTorch eager + SDPA at
#     the same length and batch (eager has no recompute: it stops where it runs out of memory).
# Prints every result line as it comes; a run that fails prints its last error line.
#   STEPS (5) timed steps after WARMUP (2); LENGTHS ("8192 16384 32768 65536"); EAGER (path of
#   eager_gpt_bench.py, default next to this script, else .gpu/scripts/); EXTRA: more flags for the mcore4j commands.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
steps=${STEPS:-5}; warmup=${WARMUP:-2}; extra=${EXTRA:-}
lengths=${LENGTHS:-"8192 16384 32768 65536"}
eager=${EAGER:-$here/eager_gpt_bench.py}
[ -f "$eager" ] || eager=$here/../../.gpu/scripts/eager_gpt_bench.py
java_opts="${MCORE4J_JAVA_OPTS:--Dai.djl.offline=true} -Xmx16g -Dorg.slf4j.simpleLogger.defaultLogLevel=warn"
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}

bench() { # classpath, flags...
  local cp=$1; shift
  local out
  out=$(java $java_opts -cp "$cp" io.mcore4j.samples.bench.GptBenchmark --model 1.3b --steps "$steps" \
    --warmup "$warmup" "$@" $extra 2>&1)
  local line
  line=$(grep "^gpt-benchmark model=" <<<"$out")
  if [ -n "$line" ]; then echo "$line"; return 0; fi
  echo "FAILED: $(grep -iE "out of memory|error|exception" <<<"$out" | tail -1)"
  return 1
}

echo "== 1. CP=1 costs nothing: GptBenchmark --model 1.3b (s=2048, micro-batch 4 x 2)"
bench "$CP"
if [ -n "${OLD_CP:-}" ]; then
  echo "-- the same at the commit before context parallelism"
  bench "$OLD_CP"
fi
echo "== 2. long sequences, micro-batch 1 x 1"
for s in $lengths; do
  echo "-- seq $s: eager PyTorch + SDPA"
  python3 "$eager" --seq "$s" --mbs 1 --micro 1 --steps "$steps" 2>&1 | grep -E "RESULT|OutOfMemory" | tail -1
  echo "-- seq $s: mcore4j"
  if ! bench "$CP" --seq-length "$s" --micro-batch-size 1 --micro-batches 1; then
    echo "-- seq $s: mcore4j with --recompute-granularity full"
    bench "$CP" --seq-length "$s" --micro-batch-size 1 --micro-batches 1 --recompute-granularity full --recompute-method uniform --recompute-num-layers 1
  fi
done
