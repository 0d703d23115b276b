#!/usr/bin/env bash
# grad-set-to-none-check.sh: on a GPU host, after `source .gpu/run-on-host.sh` (see docs/gpu.md), shows what
# setting the gradients to none between steps (zeroGrad(true), #25) removes from a training step: pretrain-gpt
# --mock-data on the 1.3B model of the GPU table (fp16, micro-batch 4 x 2, one GPU), 12 iterations logged every
# 4 under the CUPTI tracer of scripts/profile, summarised over the last 5 steps with the per-step count and time
# of the zero fills (FillFunctor) and the adds (CUDAFunctor_add, or AddFunctor in other builds: gradient
# accumulation and everything else that adds) and copies (copy_kernel).
# Expected against a commit that zeroed the gradients (OLD_CP, the jars of that commit, run first in the same
# call): about one fill and one add per parameter fewer per step (296 each for this model; the add of the second
# micro-batch stays), up to a few copies more where a first gradient is still referenced and so is copied rather
# than taken, and the same losses. TRACER: where the tracer library is (built there when missing).
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
  dir=$(mktemp -d /tmp/grad-set-to-none-check.XXXXXX)
  echo "== $1"
  # shellcheck disable=SC2086
  LD_PRELOAD=$tracer CUPTI_TRACE_DIR=$dir java $java_opts -cp "$2" io.mcore4j.samples.pretrain.PretrainGpt $args \
    --metrics-dir "$dir/metrics" | grep -E "^ iteration"
  python3 "$profile/summarize.py" "$(ls "$dir"/trace.*.txt* | head -1)" --steps 5 \
    --kernels FillFunctor Functor_add AddFunctor copy_kernel
}
if [ -n "${OLD_CP:-}" ]; then
  trace_run "pretrain-gpt at the earlier commit (OLD_CP: gradients zeroed)" "$OLD_CP"
fi
trace_run "pretrain-gpt (gradients set to none)" "$CP"
