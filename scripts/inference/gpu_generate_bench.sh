#!/usr/bin/env bash
# Generation throughput on one GPU: mcore4j's Generator against transformers' generate() on the same
# ~1.1B LLaMA-shaped weights and prompts, greedy, 256 new tokens, batch 1 and 16, in one call.
#
# Needs: python3 with torch (CUDA), transformers and safetensors; java; CP = the runtime class path of
# mcore4j-samples (its jars and dependencies) and DJL's JNI for the host's libtorch: docs/gpu.md and the
# scripts in scripts/gpu/ (stage.sh, then on the host `source .gpu/run-on-host.sh`, which sets CP).
#   CP=... scripts/inference/gpu_generate_bench.sh [WORK_DIR]
# FUSE_MODES (default "true false") lists the Generator's layer modes to time, each in its own JVM
# (-Dmcore4j.inference.fuse=MODE): true = static-shape layer module under libtorch's graph optimisation,
# false = caches narrowed to the length reached, optimisation off. EXTRA_JAVA_OPTS go to every JVM
# (e.g. -Dai.djl.pytorch.graph_optimizer=true with FUSE_MODES=false: the narrowed module re-specialised
# every step, the default before the static module). WARMUP_TOKENS (default 16, as transformers' warm-up)
# sets mcore4j's untimed run per batch size: the static module's shapes follow the cache length (prompt +
# tokens), so only WARMUP_TOKENS=256 warms the timed run's own shapes (libtorch then compiles its fused
# kernels before the clock starts; with 16 that compilation falls inside the timed run).
# ENGINE_MODES (default "graphs") lists runs of the continuous-batching engine (GenerateBenchmark --engine: paged
# cache, chunked prefill, decode steps per batch-size bucket): graphs = decode steps replayed from CUDA graphs,
# eager = the same static-shape steps run eagerly (--no-cuda-graphs); "" skips the engine. MAX_MODEL_LEN (default
# 512) is the positions every decode step attends over (the engine's --max-model-len).
# HF_COMPILED (default 1) also times transformers with a static cache and torch.compile (the compiled reference).
# Prints one line per batch size from each side, then how many leading ids the two agree on.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
WORK="${1:-/tmp/mcore4j-generate-bench}"
: "${CP:?set CP to the runtime class path of mcore4j-samples}"
JAVA="${JAVA_HOME:+$JAVA_HOME/bin/}java"

python3 "$HERE/gpu_generate_bench.py" make "$WORK"
MODES="${FUSE_MODES:-true false}"
for mode in $MODES; do
  echo "== mcore4j, -Dmcore4j.inference.fuse=$mode ${EXTRA_JAVA_OPTS:-}"
  # shellcheck disable=SC2086
  CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-0}" "$JAVA" -Xmx16g -Dai.djl.offline=true \
    -Dmcore4j.inference.fuse="$mode" ${EXTRA_JAVA_OPTS:-} -cp "$CP" \
    io.mcore4j.samples.generate.GenerateBenchmark --weights "$WORK/mcore4j.safetensors" \
    --prompts "$WORK/prompts.json" --output "$WORK/mcore4j_tokens_$mode.json" --batch-sizes 1,16 --num-tokens-to-generate 256 \
    --warmup-tokens "${WARMUP_TOKENS:-16}"
done
ENGINES="${ENGINE_MODES-graphs}"
for engine in $ENGINES; do
  echo "== mcore4j engine, decode $engine ${EXTRA_JAVA_OPTS:-}"
  flag=""
  [ "$engine" = eager ] && flag="--no-cuda-graphs"
  # shellcheck disable=SC2086
  CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-0}" "$JAVA" -Xmx16g -Dai.djl.offline=true ${EXTRA_JAVA_OPTS:-} -cp "$CP" \
    io.mcore4j.samples.generate.GenerateBenchmark --weights "$WORK/mcore4j.safetensors" \
    --prompts "$WORK/prompts.json" --output "$WORK/mcore4j_tokens_engine_$engine.json" --batch-sizes 1,16 \
    --num-tokens-to-generate 256 --warmup-tokens "${WARMUP_TOKENS:-16}" --engine --max-model-len "${MAX_MODEL_LEN:-512}" $flag
done
echo "== transformers"
CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-0}" python3 "$HERE/gpu_generate_bench.py" hf "$WORK"
if [ "${HF_COMPILED:-1}" = 1 ]; then
  echo "== transformers, static cache + torch.compile (HF_COMPILED=0 skips it)"
  CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-0}" HF_COMPILE=1 python3 "$HERE/gpu_generate_bench.py" hf "$WORK"
fi
for mode in $MODES; do
  echo "== ids, -Dmcore4j.inference.fuse=$mode against transformers"
  cp "$WORK/mcore4j_tokens_$mode.json" "$WORK/mcore4j_tokens.json"
  python3 "$HERE/gpu_generate_bench.py" compare "$WORK"
done
for engine in $ENGINES; do
  echo "== ids, engine decode $engine against transformers"
  cp "$WORK/mcore4j_tokens_engine_$engine.json" "$WORK/mcore4j_tokens.json"
  python3 "$HERE/gpu_generate_bench.py" compare "$WORK"
done
