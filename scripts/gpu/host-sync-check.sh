#!/usr/bin/env bash
# host-sync-check.sh: on a GPU host, after `source .gpu/run-on-host.sh` (see docs/gpu.md), shows where a
# pretrain-gpt training step makes the host wait for the GPU (#25): pretrain-gpt --mock-data on the 1.3B model
# of the GPU table (fp16, micro-batch 4 x 2, one GPU), 12 iterations logged every 4 under the CUPTI tracer of
# scripts/profile, summarised over the last 5 steps: wall time and GPU idle time per step, and the host calls
# over 20 us per step (the waits). Expected since the commit that added this script: no cudaMemcpyAsync wait
# (the micro-batch upload is queued from pinned memory, the loss is read when the loop logs), one wait per step
# left for the optimizer's gradient-norm read. With OLD_CP (the jars of an earlier commit) that commit runs
# first in the same call. TRACER: where the tracer library is (built there when missing). KERNELS: name patterns
# whose kernels are also counted per step (summarize.py --kernels), e.g. KERNELS="FillFunctor Functor_add copy_kernel"
# for what setting the gradients to none between steps removes (#25: against a commit that zeroed them, about one
# zero fill and one add per parameter fewer per step, 296 each for this model, and the same losses).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
profile=$here/../profile
java_opts="${MCORE4J_JAVA_OPTS:--Dai.djl.offline=true} -Xmx16g -Dorg.slf4j.simpleLogger.defaultLogLevel=warn"
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
tracer=${TRACER:-/tmp/libcupti_trace.so}
[ -f "$tracer" ] || bash "$profile/build.sh" "$tracer" || exit 1
args="--num-layers 24 --hidden-size 2048 --num-attention-heads 16 --ffn-hidden-size 8192 --seq-length 2048
  --vocab-size 32768 --fp16 --mock-data --micro-batch-size 4 --global-batch-size 8 --train-iters 12 --log-interval 4
  --lr 1e-4"
trace_run() { # title, class path
  local dir
  dir=$(mktemp -d /tmp/host-sync-check.XXXXXX)
  echo "== $1"
  # shellcheck disable=SC2086
  LD_PRELOAD=$tracer CUPTI_TRACE_DIR=$dir java $java_opts -cp "$2" io.mcore4j.samples.pretrain.PretrainGpt $args \
    --metrics-dir "$dir/metrics" | grep -E "^ iteration"
  # shellcheck disable=SC2086
  python3 "$profile/summarize.py" "$(ls "$dir"/trace.*.txt | head -1)" --steps 5 ${KERNELS:+--kernels $KERNELS}
}
if [ -n "${OLD_CP:-}" ]; then
  trace_run "pretrain-gpt at the earlier commit (OLD_CP)" "$OLD_CP"
fi
trace_run "pretrain-gpt" "$CP"
