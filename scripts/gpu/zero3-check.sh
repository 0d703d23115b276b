#!/usr/bin/env bash
# zero3-check.sh: on a GPU host, after `source .gpu/run-on-host.sh` (which builds mcore4j's native library and names
# it in MCORE4J_JAVA_OPTS), checks that ZeRO-3 without recompute (each layer's weights freed in place after its
# forward and gathered again for its backward) trains as ZeRO-2 does: pretrain-gpt --mock-data on a small model,
# bf16, NPROC (4) GPUs, one micro-batch per rank, ITERS (12) iterations each logged, under
#   1. --data-parallel-sharding-strategy optim_grads (ZeRO-2),
#   2. optim_grads_params (ZeRO-3) without recompute: needs the native library (without it pretrain-gpt refuses),
#   3. optim_grads_params with full uniform recompute (the weights become views of each gather instead).
# ZeRO-3 in bf16 gathers the weights the distributed optimizer would publish, so the three must log the same losses
# (PretrainGptFsdpTest asserts this on the CPU). EXTRA: more flags for every run.
set -uo pipefail
n=${NPROC:-4}; iters=${ITERS:-12}; extra=${EXTRA:-}
java_opts="${MCORE4J_JAVA_OPTS:--Dai.djl.offline=true} -Xmx16g -Dorg.slf4j.simpleLogger.defaultLogLevel=warn -Dmcore4j.stacktrace=true"
export NCCL_NVLS_ENABLE=0
fsdp="--use-megatron-fsdp --data-parallel-sharding-strategy"
for mode in "optim_grads" "optim_grads_params" \
    "optim_grads_params --recompute-granularity full --recompute-method uniform --recompute-num-layers 1"; do
  echo "== $fsdp $mode"
  torchrun --standalone --nproc_per_node="$n" --no-python java $java_opts -cp "$CP" io.mcore4j.samples.pretrain.PretrainGpt \
    --num-layers 4 --hidden-size 512 --num-attention-heads 8 --seq-length 512 --vocab-size 4096 --mock-data \
    --micro-batch-size 2 --global-batch-size $((2 * n)) --bf16 --untie-embeddings-and-output-weights \
    --train-iters "$iters" --log-interval 1 --lr 1e-3 --min-lr 1e-3 --ddp-bucket-size 1000000 $fsdp $mode $extra 2>&1 \
    | grep -oE "iteration +[0-9]+/ +[0-9]+ \| loss [0-9.]+ \| lr [^|]+\| grad norm [0-9.]+|.*(Exception|Error|WARN|refus).*"
done
