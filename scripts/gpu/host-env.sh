#!/usr/bin/env bash
# source scripts/gpu/host-env.sh [JNI_SO]
#
# Sets the environment DJL 0.35.1 needs to run mcore4j on a host's own libtorch (the one inside the
# Python torch found by `python3`, or TORCH_DIR if set) instead of downloading one:
#   PYTORCH_LIBRARY_PATH, PYTORCH_VERSION, PYTORCH_FLAVOR   where libtorch is and what it is (cpu, cu130, ...)
#   DJL_CACHE_DIR (default /tmp/djl-cache)                 where DJL looks for its JNI
#   DJL_JNI_PATH     where DJL expects libdjl_torch.so for that libtorch:
#                    $DJL_CACHE_DIR/pytorch/<version>-<flavor>-<os>-<arch>/0.35.1-libdjl_torch.so
#   NCCL_NVLS_ENABLE=0                                      (NVLink SHARP off; see docs/gpu.md)
#   NCCL_GRAPH_MIXING_SUPPORT=0                             (no event waits around collectives in CUDA graphs)
#   MCORE4J_JAVA_OPTS  java options to add: DJL offline (never download), native access allowed
# JNI_SO, if given and DJL_JNI_PATH does not exist yet, is copied there (a libdjl_torch.so built
# against this libtorch by scripts/gpu/build-djl-jni.sh).
_mc4j_env() {
  local py=${PYTHON:-python3} info
  if [ -n "${TORCH_DIR:-}" ]; then
    [ -n "${PYTORCH_VERSION:-}" ] && [ -n "${PYTORCH_FLAVOR:-}" ] || {
      echo "host-env: with TORCH_DIR set, set PYTORCH_VERSION (e.g. 2.11.0) and PYTORCH_FLAVOR (cpu, cu130) too" >&2; return 1; }
    info="$TORCH_DIR $PYTORCH_VERSION $PYTORCH_FLAVOR"
  else
    info=$("$py" -c "import torch,os;c=torch.version.cuda;print(os.path.dirname(torch.__file__),torch.__version__.split('+')[0],'cu'+c.replace('.','') if c else 'cpu')") \
      || { echo "host-env: $py cannot import torch (install torch, or set TORCH_DIR, PYTORCH_VERSION, PYTORCH_FLAVOR)" >&2; return 1; }
  fi
  set -- $info
  local arch
  case $(uname -m) in x86_64|amd64) arch=x86_64 ;; aarch64|arm64) arch=aarch64 ;; *) arch=$(uname -m) ;; esac
  export PYTORCH_LIBRARY_PATH=$1/lib PYTORCH_VERSION=$2 PYTORCH_FLAVOR=$3
  export DJL_CACHE_DIR=${DJL_CACHE_DIR:-/tmp/djl-cache} NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0} \
    NCCL_GRAPH_MIXING_SUPPORT=${NCCL_GRAPH_MIXING_SUPPORT:-0}
  export DJL_JNI_PATH=$DJL_CACHE_DIR/pytorch/$2-$3-linux-$arch/0.35.1-libdjl_torch.so
  export MCORE4J_JAVA_OPTS="-Dai.djl.offline=true --enable-native-access=ALL-UNNAMED"
  if [ -n "${JNI_SO:-}" ] && [ ! -f "$DJL_JNI_PATH" ]; then
    mkdir -p "$(dirname "$DJL_JNI_PATH")" && cp "$JNI_SO" "$DJL_JNI_PATH" || return 1
  fi
  [ -f "$DJL_JNI_PATH" ] || echo "host-env: no JNI at $DJL_JNI_PATH yet (build it with scripts/gpu/build-djl-jni.sh)" >&2
  echo "libtorch $PYTORCH_VERSION ($PYTORCH_FLAVOR) at $PYTORCH_LIBRARY_PATH; JNI $DJL_JNI_PATH; java options: $MCORE4J_JAVA_OPTS"
}
JNI_SO=${1:-} _mc4j_env
