#!/usr/bin/env bash
# The GPU host's prologue, copied to .gpu/run-on-host.sh by scripts/gpu/stage.sh. Either
#   source .gpu/run-on-host.sh && java $MCORE4J_JAVA_OPTS -cp "$CP" MAIN ARGS      (sets the environment here)
#   bash .gpu/run-on-host.sh 'java $MCORE4J_JAVA_OPTS -cp "$CP" MAIN ARGS'         (runs the quoted command)
# It unpacks the staged Java runtime, builds DJL's JNI against the host's Python torch (once per
# torch version, kept in $DJL_CACHE_DIR), sources host-env.sh and exports JAVA_HOME, PATH and CP
# (the staged jars). MCORE4J_HOST_DIR (default /tmp/mcore4j-host) keeps the runtime between calls.
# Hosts that start bare each time can skip the builds: MCORE4J_PREBUILT_OUT=DIR copies what this host built into
# DIR (named for the torch version, the graph library with the source it came from), and a later host finds them
# in MCORE4J_PREBUILT (default: pre/ beside this script) and uses them where the torch version (and the source)
# match.
_mc4j_host() {
  local gpu
  gpu=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd) || return 1
  local host=${MCORE4J_HOST_DIR:-/tmp/mcore4j-host}
  mkdir -p "$host" || return 1
  if [ ! -x "$host/jre/bin/java" ] || [ "$gpu/jre.tar.xz" -nt "$host/jre/bin/java" ]; then
    rm -rf "$host/jre" && { tar xf "$gpu/jre.tar.xz" -C "$host" 2>/dev/null || python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$gpu/jre.tar.xz" "$host"; } && touch "$host/jre/bin/java" || return 1
  fi
  export JAVA_HOME=$host/jre
  export PATH=$JAVA_HOME/bin:$PATH
  export CP="$gpu/lib/*"
  source "$gpu/scripts/host-env.sh" || return 1
  local pre=${MCORE4J_PREBUILT:-$gpu/pre} tag="$PYTORCH_VERSION-$PYTORCH_FLAVOR"
  local graphs=${MCORE4J_CUDA_GRAPHS_LIB:-$(dirname "$DJL_JNI_PATH")/libmcore4j_cuda_graphs.so}
  if [ ! -f "$DJL_JNI_PATH" ] && [ -f "$pre/$tag-libdjl_torch.so" ]; then
    mkdir -p "$(dirname "$DJL_JNI_PATH")" && cp "$pre/$tag-libdjl_torch.so" "$DJL_JNI_PATH" && echo "DJL's JNI from $pre"
  fi
  if [ ! -f "$graphs" ] && [ -f "$pre/$tag-libmcore4j_cuda_graphs.so" ] && [ -f "$gpu/native/cuda_graphs.cpp" ] \
      && cmp -s "$pre/$tag-cuda_graphs.cpp" "$gpu/native/cuda_graphs.cpp"; then
    mkdir -p "$(dirname "$graphs")" && cp "$pre/$tag-libmcore4j_cuda_graphs.so" "$graphs" && touch "$graphs" \
      && echo "mcore4j's graph library from $pre"
  fi
  if [ ! -f "$DJL_JNI_PATH" ]; then
    local log=$host/djl-jni-build.log
    echo "building DJL's JNI against $PYTORCH_LIBRARY_PATH (log: $log)"
    JNI_INCLUDE_DIRS="$gpu/jni-include" DJL_JNI_HEADER_DIR="$gpu/jni-include" \
      bash "$gpu/scripts/build-djl-jni.sh" "$gpu/djl-src" "$(dirname "$PYTORCH_LIBRARY_PATH")" "$DJL_JNI_PATH" >"$log" 2>&1 \
      || { tail -30 "$log" >&2; echo "run-on-host: the JNI build failed (log: $log)" >&2; return 1; }
    tail -1 "$log"
  fi
  # mcore4j's CUDA graph library, against the same libtorch (once per torch version); without it graphs are off
  if [ -f "$gpu/native/cuda_graphs.cpp" ] && { [ ! -f "$graphs" ] || [ "$gpu/native/cuda_graphs.cpp" -nt "$graphs" ]; }; then
    JNI_INCLUDE_DIRS="$gpu/jni-include" bash "$gpu/scripts/build-cuda-graphs.sh" "$gpu/native/cuda_graphs.cpp" \
      "$(dirname "$PYTORCH_LIBRARY_PATH")" "$graphs" >"$host/cuda-graphs-build.log" 2>&1 \
      || { tail -20 "$host/cuda-graphs-build.log" >&2; echo "run-on-host: the CUDA graph library did not build; graphs stay off" >&2; }
  fi
  [ -f "$graphs" ] && export MCORE4J_JAVA_OPTS="$MCORE4J_JAVA_OPTS -Dmcore4j.cuda.graphs.library=$graphs"
  if [ -n "${MCORE4J_PREBUILT_OUT:-}" ]; then
    mkdir -p "$MCORE4J_PREBUILT_OUT" && cp "$DJL_JNI_PATH" "$MCORE4J_PREBUILT_OUT/$tag-libdjl_torch.so"
    [ -f "$graphs" ] && cp "$graphs" "$MCORE4J_PREBUILT_OUT/$tag-libmcore4j_cuda_graphs.so" \
      && cp "$gpu/native/cuda_graphs.cpp" "$MCORE4J_PREBUILT_OUT/$tag-cuda_graphs.cpp"
  fi
  echo "java: $(java -version 2>&1 | head -1); CP=$CP"
}
if [ "${BASH_SOURCE[0]}" != "$0" ]; then
  _mc4j_host
else
  set -e
  _mc4j_host
  [ $# -eq 0 ] || exec bash -c "$*"
fi
