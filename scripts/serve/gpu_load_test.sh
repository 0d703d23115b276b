#!/usr/bin/env bash
# gpu_load_test.sh WORK_DIR: issue 41's load test on one GPU. Starts `serve-gpt` on the Hugging Face directory
# WORK_DIR/hf (scripts/inference/gpu_generate_bench.py make WORK_DIR writes it: the ~1.1B LLaMA shape in fp16), waits
# for /health, sends REQUESTS (default 64) concurrent streamed completions of mixed prompt and output lengths with
# load_test.py, prints its throughput and p50/p99 time to first token and inter-token latency, and stops the server.
# Needs CP (the runtime class path) and java, as gpu_generate_bench.sh; SERVE_FLAGS go to serve-gpt.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
WORK="${1:?usage: gpu_load_test.sh WORK_DIR}"
: "${CP:?set CP to the runtime class path of mcore4j-samples}"
PORT="${PORT:-8011}"
[ -d "$WORK/hf" ] || python3 "$HERE/../inference/gpu_generate_bench.py" make "$WORK"
# shellcheck disable=SC2086
CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-0}" "${JAVA_HOME:+$JAVA_HOME/bin/}java" -Xmx16g -Dai.djl.offline=true \
  ${EXTRA_JAVA_OPTS:-} -cp "$CP" io.mcore4j.samples.cli.Mcore4jCli serve-gpt --load-hf "$WORK/hf" --host 127.0.0.1 \
  --port "$PORT" --served-model-name bench --max-num-seqs "${MAX_NUM_SEQS:-64}" --max-queue 256 \
  --max-model-len "${MAX_MODEL_LEN:-1024}" ${SERVE_FLAGS:-} >"$WORK/serve.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT
for _ in $(seq 1 180); do
  python3 -c "import urllib.request,sys; urllib.request.urlopen(sys.argv[1], timeout=2)" "http://127.0.0.1:$PORT/health" \
    >/dev/null 2>&1 && break
  kill -0 $server 2>/dev/null || { echo "serve-gpt exited:"; tail -20 "$WORK/serve.log"; exit 1; }
  sleep 1
done
grep -m1 "^serve-gpt:" "$WORK/serve.log" || true
# a warm-up pass (compiles and captures the decode steps), then the timed one
python3 "$HERE/load_test.py" --url "http://127.0.0.1:$PORT" --requests "${REQUESTS:-64}" --prompt-words 4:64 \
  --output-tokens 16:128 --seed 1 >/dev/null || true
python3 "$HERE/load_test.py" --url "http://127.0.0.1:$PORT" --requests "${REQUESTS:-64}" --prompt-words 4:64 \
  --output-tokens 16:128
