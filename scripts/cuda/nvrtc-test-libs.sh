#!/usr/bin/env bash
# nvrtc-test-libs.sh OUT [WHEEL]: puts into OUT what KernelSourcesCompileTest (cuda module) needs to compile mcore4j's
# CUDA sources with NVRTC on a machine without a GPU or CUDA toolkit: libnvrtc.so.13 (and its builtins) from an
# nvidia-cuda-nvrtc 13.x wheel (WHEEL, default: the one under /opt/pypi-more/files), and two empty stand-ins,
# libcudart.so.13 (with its symbol version) and libcuda.so.1, which JavaCPP's NVRTC binding loads with its CUDA runtime
# binding but which compiling never calls. Needs unzip and gcc. Then:
#   LD_LIBRARY_PATH=OUT ./mvnw -o -B -pl cuda test -Dtest=KernelSourcesCompileTest -Dsurefire.failIfNoSpecifiedTests=false
set -euo pipefail
out=${1:?usage: nvrtc-test-libs.sh OUT [WHEEL]}
wheel=${2:-$(ls /opt/pypi-more/files/nvidia_cuda_nvrtc-13.*.whl 2>/dev/null | head -1)}
[ -f "$wheel" ] || { echo "nvrtc-test-libs: no nvidia-cuda-nvrtc 13 wheel (give its path)" >&2; exit 1; }
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
unzip -q -o "$wheel" 'nvidia/cu13/lib/*' -d "$tmp"
cp "$tmp"/nvidia/cu13/lib/* "$out"/
echo 'int mcore4j_cudart_stand_in(void) { return 0; }' > "$tmp/cudart.c"
echo 'libcudart.so.13 { global: *; };' > "$tmp/cudart.map"
gcc -shared -fPIC -o "$out/libcudart.so.13" -Wl,-soname,libcudart.so.13 -Wl,--version-script="$tmp/cudart.map" "$tmp/cudart.c"
echo 'int mcore4j_cuda_stand_in(void) { return 0; }' > "$tmp/cuda.c"
gcc -shared -fPIC -o "$out/libcuda.so.1" -Wl,-soname,libcuda.so.1 "$tmp/cuda.c"
echo "nvrtc-test-libs: $out ($(ls "$out" | tr '\n' ' '))"
