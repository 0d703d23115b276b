#!/usr/bin/env bash
# collective-check.sh: on a GPU host, after `source .gpu/run-on-host.sh` (see docs/gpu.md; CP holds mcore4j's jars),
# measures collective bandwidth (issue 32): mcore4j's NCCL communicators (io.mcore4j.samples.bench.
# CollectiveBenchmark) and then torch.distributed's NCCL (collective_bench.py), each at NPROC processes under
# torchrun on one host, and prints both sets of lines, `collective-benchmark ...` and `collective-benchmark-torch ...`,
# one per operation and message size: time per call, algbw and nccl-tests' busbw (docs/benchmarks.md,
# "Collective bandwidth"). Runs in well under 2 minutes with the defaults.
# Environment:
#   NPROC (2)    processes (GPUs)
#   SIZES (1,4,16,32,64)   message sizes in MiB (the full tensor; 32 is the 1.3B model's [8192, 2048] bf16 all-reduce)
#   DTYPE (bf16), ITERATIONS (50), WARMUP (2000: the JVM needs that many calls to compile the call path)
#   OPS (all_reduce,all_reduce_out,reduce_scatter,all_gather)   all_reduce_out: the out-of-place all-reduce that
#                tensor parallelism's forward makes (mcore4j's Communicator.allReduce; torch's functional all_reduce)
#   RUN_TIMEOUT_S (150)   cap on each of the two runs
#   OUT (/tmp/collective-check)   where each run's full log goes
# Exit status: 0 when both runs succeeded, 1 otherwise (the failed run's log tail is printed).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)

: "${CP:?CP is not set: source .gpu/run-on-host.sh first (docs/gpu.md)}"
nproc=${NPROC:-2}
limit=${RUN_TIMEOUT_S:-150}
out=${OUT:-/tmp/collective-check}; mkdir -p "$out"
java_opts="${MCORE4J_JAVA_OPTS:--Dai.djl.offline=true} -Xmx8g -Dorg.slf4j.simpleLogger.defaultLogLevel=warn"
flags=(--sizes-mib "${SIZES:-1,4,16,32,64}" --dtype "${DTYPE:-bf16}" --iterations "${ITERATIONS:-50}"
       --warmup "${WARMUP:-2000}" --ops "${OPS:-all_reduce,all_reduce_out,reduce_scatter,all_gather}")

status=0
run() { # run NAME PREFIX CMD...: CMD under torchrun; prints the lines starting with PREFIX, or the log's tail
  local name=$1 prefix=$2 log="$out/$1.log" code; shift 2
  echo "== $name: $nproc processes (log: $log)"
  NCCL_NVLS_ENABLE=0 timeout -k 10 "$limit" torchrun --standalone --nproc_per_node="$nproc" "$@" >"$log" 2>&1
  code=$?
  grep -E "^$prefix " "$log"
  if [ "$code" -ne 0 ]; then
    local why="exit $code"; [ "$code" -eq 124 ] && why="timed out after ${limit} s"
    echo "$name failed ($why); the log's tail:"
    tail -n 15 "$log" | sed 's/^/  | /'
    status=1
  fi
}

# shellcheck disable=SC2086 # java_opts is a flag list
run mcore4j collective-benchmark --no-python java $java_opts -cp "$CP" io.mcore4j.samples.bench.CollectiveBenchmark \
  "${flags[@]}"
run torch collective-benchmark-torch "$here/collective_bench.py" "${flags[@]}"
exit "$status"
