#!/usr/bin/env bash
# peer-copies-check.sh: on a host of 2 or more GPUs, after `source .gpu/run-on-host.sh` (CP holds mcore4j's jars; the
# class path also needs nccl/target/test-classes), checks and measures the copy-engine transport of mcore4j-nccl
# (PeerCopies; docs/parallelism.md, "Copy engines") in one call:
#   1. NcclCollectivesCheck --skip-large with every started transfer and every sum all-reduce of a floating tensor on
#      the copy engines, in handshakes of 16 bytes (-Dmcore4j.nccl.peerCopies=on -Dmcore4j.nccl.peerReductions=true
#      -Dmcore4j.nccl.peerCopySlotBytes=16);
#   2. the 1.3B model at TP (NPROC ranks) under a CUDA graph, interleaved: NCCL's kernels, then the all-reduces on the
#      copy engines inside the graph (-Dmcore4j.nccl.peerReductions=true with the default capture mode), twice each;
#      then eager with everything on the copy engines (=on), against eager on NCCL's kernels; then TP with
#      --sequence-parallel --tp-comm-overlap under a graph, its started transfers on the copy engines (the default),
#      and with its reductions there too.
#   NPROC (2), STEPS (4), WARMUP (3); EXTRA: more GptBenchmark flags (e.g. --sequence-parallel --tp-comm-overlap);
#   PAIRS (2): graph pairs in step 2; CHECK, EAGER, OVERLAP (1 each): 0 leaves out step 1, the eager pair, or the
#   sequence-parallel runs (to fit more in one call).
# Each run is limited to RUN_TIMEOUT_S (150) seconds; a stopped run's workers are killed before the next.
set -uo pipefail
: "${CP:?CP is not set: source .gpu/run-on-host.sh first (docs/gpu.md)}"
n=${NPROC:-2}; pairs=${PAIRS:-2}; steps=${STEPS:-4}; warmup=${WARMUP:-3}; extra=${EXTRA:-}; limit=${RUN_TIMEOUT_S:-150}
java_opts="${MCORE4J_JAVA_OPTS:--Dai.djl.offline=true} -Xmx16g -Dorg.slf4j.simpleLogger.defaultLogLevel=warn"
graph="--cuda-graph-impl local --cuda-graph-scope full_iteration --cuda-graph-warmup-steps 2"
export NCCL_NVLS_ENABLE=0
log=$(mktemp)
launch() { # launch PROPS CLASS ARGS...: one run under torchrun, its result lines printed
  local props=$1; shift
  timeout -k 10 "$limit" torchrun --standalone --nproc_per_node="$n" --no-python java $java_opts $props \
    -cp "$CP:nccl/target/test-classes" "$@" >"$log" 2>&1
  local rc=$?
  pkill -9 -f "io.mcore4j" 2>/dev/null; sleep 1
  grep -E "gpt-benchmark|passed|FAIL|copy engine|Exception" "$log" | head -12
  [ "$rc" -eq 0 ] || { echo "(exit $rc; the log's last lines:)"; grep -vE "^\s+at " "$log" | tail -8; }
}
ce="-Dmcore4j.nccl.peerCopies=on -Dmcore4j.nccl.peerReductions=true"
if [ "${CHECK:-1}" = 1 ]; then
  echo "== NcclCollectivesCheck, copy engines, 16-byte handshakes"
  launch "$ce -Dmcore4j.nccl.peerCopySlotBytes=16" io.mcore4j.parallel.nccl.NcclCollectivesCheck --skip-large
fi
bench="io.mcore4j.samples.bench.GptBenchmark --bf16 --model 1.3b --steps $steps --warmup $warmup --tensor-model-parallel-size $n $extra"
for i in $(seq 1 "$pairs"); do
  echo "== TP$n graph, NCCL's kernels ($i)";                 launch "-Dmcore4j.nccl.peerCopies=off" $bench $graph
  echo "== TP$n graph, all-reduces on the copy engines ($i)"; launch "-Dmcore4j.nccl.peerReductions=true" $bench $graph
done
if [ "${EAGER:-1}" = 1 ]; then
  echo "== TP$n eager, NCCL's kernels";     launch "-Dmcore4j.nccl.peerCopies=off" $bench
  echo "== TP$n eager, copy engines";       launch "$ce" $bench
fi
if [ "${OVERLAP:-1}" = 1 ]; then
  overlap="--sequence-parallel --tp-comm-overlap"
  echo "== TP$n + SP + --tp-comm-overlap graph, started transfers on the copy engines (the default)"
  launch "" $bench $overlap $graph
  echo "== the same with its reduce-scatters and all-reduces on the copy engines too"
  launch "-Dmcore4j.nccl.peerReductions=true" $bench $overlap $graph
fi
rm -f "$log"
