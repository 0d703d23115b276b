#!/usr/bin/env bash
# fp8-check.sh (issue 35): on a one-GPU host, after `source .gpu/run-on-host.sh` (see docs/gpu.md; CP holds mcore4j's
# jars), in one call:
#   0. cast: io.mcore4j.samples.bench.Fp8CastCheck, the fused CUDA float8 cast (fp8_cast.cu) against the TorchScript
#      reference cast bit for bit (bf16/fp16/fp32 to e4m3 and e5m2, delayed and tensorwise, NaN/inf/saturating values,
#      transposed copy, amax), and both casts' time at [8192, 8192];
#   1. module: mcore4j's FP8 TorchScript module on CUDA (fp8_module_check.py): _scaled_mm against the float32
#      reference on the same float8 operands, at the scale views of a second linear (byte offsets 48..80, the
#      16-byte aligned layout cuBLASLt needs), and the FP8 forward/backward TFLOP/s against bf16 at 8192^3;
#   2. losses: pretrain-gpt --mock-data on a small model (4 layers, hidden 512, 20 iterations, every 5th logged), --bf16
#      and --bf16 --fp8-format hybrid: the FP8 run's losses on _scaled_mm should stay within a few percent of bf16's;
#   3. 1.3b: GptBenchmark --model 1.3b --bf16 against --bf16 --fp8-format hybrid (micro-batch 4 x 2);
#   4. llama3b: the same pair for a LLaMA shape that fits one 80 GB GPU with Adam's state (LLaMA-7B does not:
#      about 18 bytes a parameter before activations): --model llama7b (RMSNorm, RoPE, SwiGLU, no biases, untied
#      output) at LLAMA_LAYERS (26) layers, hidden 3200, 25 heads of 128, FFN 8640 (OpenLLaMA-3B's widths, 3.4B
#      parameters), micro-batch 1 x 4, --recompute-granularity selective.
# Each pair prints its two gpt-benchmark lines and "fp8/bf16 tokens/s ratio R".
#   STEPS (5) timed steps after WARMUP (2); ROWS (cast module losses 1.3b llama3b) picks the parts; EXTRA: more flags for every
#   GptBenchmark run; FP8 ("--fp8-format hybrid"): the FP8 run's flags.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
steps=${STEPS:-5}; warmup=${WARMUP:-2}; rows=${ROWS:-cast module losses 1.3b llama3b}; extra=${EXTRA:-}
fp8=${FP8:---fp8-format hybrid}
# the FP8 package logs at info which GEMMs it runs (a GPU whose _scaled_mm fails stops the run with the reason)
java_opts="${MCORE4J_JAVA_OPTS:--Dai.djl.offline=true} -Xmx16g -Dorg.slf4j.simpleLogger.defaultLogLevel=warn -Dorg.slf4j.simpleLogger.log.io.mcore4j.core.fp8=info -Dmcore4j.stacktrace=true"
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
log=$(mktemp)
# one GptBenchmark run; prints its result line (or the log's tail) and leaves its tokens/s/GPU in $tps
bench() {
  java $java_opts -cp "$CP" io.mcore4j.samples.bench.GptBenchmark --steps "$steps" --warmup "$warmup" "$@" $extra >"$log" 2>&1
  grep -E "gpt-benchmark|FP8 GEMMs|WARN" "$log" || { echo "(no result; the run's last lines:)"; grep -vE "^\s+at (java|jdk|ai\.djl|picocli)" "$log" | tail -30; }
  tps=$(grep -oE "tokens/s/GPU [0-9.]+" "$log" | tail -1 | awk '{print $2}')
}
pair() {
  local name=$1; shift
  echo "== $name bf16"; bench "$@" --bf16; local base=$tps
  echo "== $name bf16 + $fp8"; bench "$@" --bf16 $fp8; local with=$tps
  if [ -n "$base" ] && [ -n "$with" ]; then
    awk -v a="$with" -v b="$base" -v n="$name" 'BEGIN { printf "%s: fp8/bf16 tokens/s ratio %.3f (%s vs %s tokens/s/GPU)\n", n, a / b, a, b }'
  else
    echo "$name: fp8/bf16 tokens/s ratio n/a (a run gave no result)"
  fi
}
for row in $rows; do
  case $row in
    cast)
      echo "== fused FP8 cast against the reference"
      java $java_opts -cp "$CP" io.mcore4j.samples.bench.Fp8CastCheck 2>&1 | grep -E "FAIL|first difference|TIME|Fp8CastCheck|FP8 casts|Exception|Error" ;;
    module)
      module=${FP8_MODULE:-$here/../../core/src/main/resources/io/mcore4j/core/torchscript/fp8_linear.pt}
      [ -f "$module" ] || module=$(cd "$here/../.." && pwd)/core/src/main/resources/io/mcore4j/core/torchscript/fp8_linear.pt
      echo "== FP8 module on CUDA"
      python3 "$here/fp8_module_check.py" "$module" 2>&1 | grep -v Warning ;;
    losses)
      for f in "" "$fp8"; do
        echo "== pretrain-gpt losses --bf16 $f"
        java $java_opts -cp "$CP" io.mcore4j.samples.pretrain.PretrainGpt --num-layers 4 --hidden-size 512 \
          --num-attention-heads 8 --seq-length 512 --vocab-size 4096 --mock-data --micro-batch-size 4 \
          --global-batch-size 16 --bf16 --train-iters 20 --log-interval 5 --lr 1e-3 --min-lr 1e-3 $f 2>&1 \
          | grep -oE "iteration +[0-9]+/ +[0-9]+ \| loss [0-9.]+|FP8 GEMMs.*|.*(Exception|Error).*" | head -20
      done ;;
    1.3b) pair 1.3b --model 1.3b --micro-batch-size 4 --micro-batches 2 ;;
    llama3b)
      pair llama3b --model llama7b --num-layers "${LLAMA_LAYERS:-26}" --hidden-size 3200 --num-attention-heads 25 \
        --ffn-hidden-size 8640 --micro-batch-size 1 --micro-batches 4 --recompute-granularity selective ;;
    *) echo "fp8-check: unknown row $row (cast, module, losses, 1.3b, llama3b)" >&2; exit 2 ;;
  esac
done
rm -f "$log"
