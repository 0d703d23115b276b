#!/usr/bin/env bash
# build-cuda-graphs.sh SRC TORCH_DIR OUT
#
# Builds mcore4j's CUDA graph library (libmcore4j_cuda_graphs.so) from SRC (cuda/src/main/native/cuda_graphs.cpp,
# staged as .gpu/native/cuda_graphs.cpp) against the libtorch in TORCH_DIR, the one DJL drives: the library calls
# libtorch's at::cuda::CUDAGraph and resizes a tensor's storage in place (ZeRO-3's release of gathered weights), which
# DJL's JNI does not expose. mcore4j loads it from the path in the system property mcore4j.cuda.graphs.library
# (run-on-host.sh sets it in MCORE4J_JAVA_OPTS); without it CUDA graphs are off and ZeRO-3 needs full recompute.
#
# Tools: g++; the CUDA runtime headers (/usr/local/cuda/include, $CUDA_HOME/include, or the pip nvidia packages next
# to torch). JNI headers: JNI_INCLUDE_DIRS (folders with jni.h and jni_md.h), default $JAVA_HOME/include{,/linux}.
set -euo pipefail
usage="usage: build-cuda-graphs.sh SRC TORCH_DIR OUT"
src=${1:?$usage}
torch_dir=$(cd "${2:?$usage}" && pwd)
out=${3:?$usage}
fail() { echo "build-cuda-graphs: $*" >&2; exit 1; }
[ -f "$src" ] || fail "no source $src"
[ -e "$torch_dir/lib/libtorch_cuda.so" ] || fail "$torch_dir/lib has no libtorch_cuda.so: CUDA graphs need a CUDA libtorch"
command -v g++ >/dev/null || fail "g++ not on PATH"
jni=${JNI_INCLUDE_DIRS:-${JAVA_HOME:+$JAVA_HOME/include $JAVA_HOME/include/linux}}
[ -n "$jni" ] || fail "set JNI_INCLUDE_DIRS (folders with jni.h and jni_md.h) or JAVA_HOME"
incs=()
for d in $jni; do incs+=(-I"$d"); done
cuda_inc=
for d in "${CUDA_HOME:-/nonexistent}/include" /usr/local/cuda/include "$(dirname "$torch_dir")"/nvidia/cu13/include \
    "$(dirname "$torch_dir")"/nvidia/cuda_runtime/include; do
  if [ -f "$d/cuda_runtime_api.h" ]; then cuda_inc=$d; break; fi
done
[ -n "$cuda_inc" ] || fail "no cuda_runtime_api.h under CUDA_HOME, /usr/local/cuda or the pip nvidia packages"
abi=0
nm -D --defined-only "$torch_dir/lib/libc10.so" 2>/dev/null | grep -q __cxx11 && abi=1
mkdir -p "$(dirname "$out")"
g++ -std=c++17 -O2 -fPIC -shared -D_GLIBCXX_USE_CXX11_ABI=$abi -w "${incs[@]}" -I"$cuda_inc" \
  -I"$torch_dir/include" -I"$torch_dir/include/torch/csrc/api/include" "$src" -o "$out" \
  -L"$torch_dir/lib" -Wl,--no-as-needed -ltorch_cuda -lc10_cuda -ltorch_cpu -lc10 -Wl,-rpath,"$torch_dir/lib"
echo "build-cuda-graphs: wrote $out"
