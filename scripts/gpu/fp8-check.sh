#!/usr/bin/env bash
# fp8-check.sh (issue 35): on a GPU host, after `source .gpu/run-on-host.sh` (see docs/gpu.md), checks mcore4j's FP8
# TorchScript module on CUDA: _scaled_mm against the float32 reference on the same float8 operands, and the FP8
# forward/backward calls' TFLOP/s against bf16 at 8192^3, with graph optimisation off (mcore4j's setting) and on.
# The GptBenchmark / pretrain-gpt FP8 pairs join this script when the flags reach them (not yet: see docs).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
module=${FP8_MODULE:-$here/../../core/src/main/resources/io/mcore4j/core/torchscript/fp8_linear.pt}
[ -f "$module" ] || module=$(cd "$here/../.." && pwd)/core/src/main/resources/io/mcore4j/core/torchscript/fp8_linear.pt
echo "== FP8 module on CUDA"
python3 "$here/fp8_module_check.py" "$module" 2>&1 | grep -v Warning
