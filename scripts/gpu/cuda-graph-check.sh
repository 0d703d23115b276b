#!/usr/bin/env bash
# cuda-graph-check.sh: on a GPU host, after `source .gpu/run-on-host.sh` (which builds mcore4j's CUDA graph
# library and names it in MCORE4J_JAVA_OPTS), compares eager steps with steps replayed from a CUDA graph
# (--cuda-graph-impl local --cuda-graph-scope full_iteration) in one call:
#   1. the host's cost: GptBenchmark --model probe --phases, eager and graphed (fp16 and bf16);
#   2. the 1.3B model at TP1, eager and graphed;
#   3. the same losses: pretrain-gpt --mock-data on a small model for ITERS iterations, eager and graphed,
#      every iteration logged (a graph replays the eager step's kernels, so the losses must agree);
#   4. (row sp-overlap, only when named; NPROC 2 or more) the 1.3B model's first 4 layers at TP with
#      --sequence-parallel --tp-comm-overlap: eager, graphed with the started transfers on the copy engines (the
#      default, -Dmcore4j.nccl.peerCopies=capture) and graphed on NCCL's kernels (=off), which stalled on 2×H200 in
#      session 23, also with NCCL_GRAPH_REGISTER=0 (NCCL's registration of a graph's buffers off); each run stops
#      after SP_TIMEOUT_S (90) seconds and its worker JVMs are killed.
# With NPROC>1 every run is launched under torchrun on NPROC GPUs with --tensor-model-parallel-size TP (default NPROC).
#   STEPS (10) timed steps after WARMUP (5); ROWS (probe 1.3b losses) picks the parts; PROBE ("fp16 bf16") the
#   probe's precisions; EXTRA: more flags for every run.
set -uo pipefail
steps=${STEPS:-10}; warmup=${WARMUP:-5}; rows=${ROWS:-probe 1.3b losses}; extra=${EXTRA:-}; n=${NPROC:-1}; tp=${TP:-$n}
java_opts="${MCORE4J_JAVA_OPTS:--Dai.djl.offline=true} -Xmx16g -Dorg.slf4j.simpleLogger.defaultLogLevel=warn -Dmcore4j.stacktrace=true"
graph="--cuda-graph-impl local --cuda-graph-scope full_iteration --cuda-graph-warmup-steps 2"
export NCCL_NVLS_ENABLE=0
run() {
  if [ "$n" -gt 1 ]; then
    torchrun --standalone --nproc_per_node="$n" --no-python java $java_opts -cp "$CP" "$@" --tensor-model-parallel-size "$tp"
  else
    java $java_opts -cp "$CP" "$@"
  fi
}
log=$(mktemp)
bench() {
  run io.mcore4j.samples.bench.GptBenchmark --steps "$steps" --warmup "$warmup" "$@" $extra >"$log" 2>&1
  grep -E "gpt-benchmark|WARN" "$log" || { echo "(no result; the run's last lines:)"; grep -vE "^\s+at (java|jdk|ai\.djl|picocli)" "$log" | tail -40; }
}
for row in $rows; do
  case $row in
    probe)
      for p in ${PROBE:-fp16 bf16}; do
        f=; [ "$p" = bf16 ] && f=--bf16
        echo "== probe $p eager";  bench --model probe --phases $f
        echo "== probe $p graph";  bench --model probe --phases $f $graph
      done ;;
    1.3b)
      echo "== 1.3b bf16 eager"; bench --model 1.3b --bf16
      echo "== 1.3b bf16 graph"; bench --model 1.3b --bf16 $graph ;;
    losses)
      for g in "" "$graph"; do
        echo "== pretrain-gpt losses ${g:+graph}${g:-eager}"
        run io.mcore4j.samples.pretrain.PretrainGpt --num-layers 4 --hidden-size 256 --num-attention-heads 8 \
          --seq-length 256 --vocab-size 4096 --mock-data --micro-batch-size 2 --global-batch-size 8 --bf16 \
          --train-iters 12 --log-interval 1 --lr 1e-3 --min-lr 1e-3 $g $extra 2>&1 \
          | grep -oE "iteration +[0-9]+/ +[0-9]+ \| loss [0-9.]+ \| lr [^|]+\| grad norm [0-9.]+|.*(Exception|Error|WARN).*"
      done ;;
    sp-overlap)
      [ "$n" -gt 1 ] || { echo "cuda-graph-check: row sp-overlap needs NPROC of 2 or more" >&2; exit 2; }
      for mode in eager capture off off-noreg; do
        g=$graph; props="-Dmcore4j.nccl.peerCopies=${mode%-noreg}"; reg=${NCCL_GRAPH_REGISTER:-}
        case $mode in
          eager) g=; props=; echo "== sp-overlap eager";;
          capture) echo "== sp-overlap graph, started transfers on the copy engines (the default)";;
          off) echo "== sp-overlap graph, started transfers on NCCL's kernels";;
          off-noreg) reg=0; echo "== sp-overlap graph, on NCCL's kernels with NCCL_GRAPH_REGISTER=0";;
        esac
        ( java_opts="$java_opts $props"; [ -n "$reg" ] && export NCCL_GRAPH_REGISTER=$reg
          bench --model 1.3b --bf16 --num-layers 4 --sequence-parallel --tp-comm-overlap $g ) &
        pid=$!; waited=0
        while kill -0 "$pid" 2>/dev/null && [ "$waited" -lt "${SP_TIMEOUT_S:-90}" ]; do sleep 1; waited=$((waited + 1)); done
        if kill -0 "$pid" 2>/dev/null; then
          echo "(stopped after ${SP_TIMEOUT_S:-90} s without a result)"
          pkill -9 -f io.mcore4j.samples.bench.GptBenchmark; pkill -9 -P "$pid"; kill -9 "$pid" 2>/dev/null
        fi
        wait "$pid" 2>/dev/null || true
      done ;;
    *) echo "cuda-graph-check: unknown row $row (probe, 1.3b, losses, sp-overlap)" >&2; exit 2 ;;
  esac
done
