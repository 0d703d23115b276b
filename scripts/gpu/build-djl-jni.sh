#!/usr/bin/env bash
# build-djl-jni.sh DJL_SRC TORCH_DIR OUT
#
# Builds DJL's PyTorch JNI (libdjl_torch.so) from a DJL v0.35.1 source tree against a given libtorch,
# so that DJL 0.35.1's Java API can drive a libtorch other than the 2.7.1 its published JNI targets
# (e.g. the libtorch inside a pip-installed torch on a GPU host).
#
#   DJL_SRC    a DJL checkout at v0.35.1 (git clone -b v0.35.1 https://github.com/deepjavalibrary/djl),
#              or the trimmed copy scripts/gpu/stage.sh puts under .gpu/djl-src; it needs
#              engines/pytorch/pytorch-native/{CMakeLists.txt,src/main/native} and api/src/main/native
#   TORCH_DIR  a libtorch: a pip torch's package folder (python3 -c 'import torch,os;print(os.path.dirname(torch.__file__))')
#              or an unpacked libtorch zip; it needs include/, lib/ and share/cmake/Torch
#   OUT        the library to write (a path ending in .so, or a folder that receives libdjl_torch.so)
#
# Tools: g++ and cmake (3.18+). Java is NOT needed on the build machine when both headers are given:
#   JNI_INCLUDE_DIRS   folders holding jni.h and jni_md.h (space separated); default $JAVA_HOME/include
#                      and $JAVA_HOME/include/linux
#   DJL_JNI_HEADER_DIR folder holding ai_djl_pytorch_jni_PyTorchLibrary.h (generated from DJL's
#                      PyTorchLibrary.java by javac -h; scripts/gpu/jni-headers.sh writes it); default:
#                      DJL_SRC/engines/pytorch/pytorch-native/build/include, else generated here with javac
#   DJL_JNI_BUILD      cmake (default: DJL's own CMakeLists.txt) or gxx (a direct g++ build of the same
#                      sources, without USE_CUDA; used automatically when CMake cannot configure, e.g. a
#                      CUDA libtorch on a host without the CUDA toolkit that Torch's CMake config requires)
#   DJL_JNI_USE_CUDA   1/0: compile DJL's CUDA-only extras (CUDA cache release, separate inference stream);
#                      default 1 when TORCH_DIR holds libtorch_cuda.so
#   JOBS               parallel compile jobs (default: nproc)
set -euo pipefail

usage="usage: build-djl-jni.sh DJL_SRC TORCH_DIR OUT"
djl_src=$(cd "${1:?$usage}" && pwd)
torch_dir=$(cd "${2:?$usage}" && pwd)
out=${3:?$usage}
native=$djl_src/engines/pytorch/pytorch-native
utils=$djl_src/api/src/main/native
jobs=${JOBS:-$(nproc 2>/dev/null || echo 2)}

fail() { echo "build-djl-jni: $*" >&2; exit 1; }
[ -f "$native/CMakeLists.txt" ] || fail "no $native/CMakeLists.txt: DJL_SRC must be a DJL v0.35.1 source tree"
[ -f "$utils/djl/utils.h" ] || fail "no $utils/djl/utils.h in DJL_SRC"
[ -d "$torch_dir/include/torch" ] && [ -d "$torch_dir/lib" ] || fail "$torch_dir has no include/torch and lib/: TORCH_DIR must be a libtorch"
command -v g++ >/dev/null || fail "g++ not on PATH"

# JNI headers: jni.h and jni_md.h
if [ -z "${JNI_INCLUDE_DIRS:-}" ]; then
  [ -n "${JAVA_HOME:-}" ] || fail "set JNI_INCLUDE_DIRS (folders with jni.h and jni_md.h) or JAVA_HOME"
  JNI_INCLUDE_DIRS="$JAVA_HOME/include $JAVA_HOME/include/linux"
fi
jni_h= jni_md_h=
for d in $JNI_INCLUDE_DIRS; do
  [ -f "$d/jni.h" ] && jni_h=$(cd "$d" && pwd)
  [ -f "$d/jni_md.h" ] && jni_md_h=$(cd "$d" && pwd)
done
[ -n "$jni_h" ] && [ -n "$jni_md_h" ] || fail "jni.h and jni_md.h not both found in JNI_INCLUDE_DIRS='$JNI_INCLUDE_DIRS'"

work=$(mktemp -d "${TMPDIR:-/tmp}/djl-jni.XXXXXX")
trap 'rm -rf "$work"' EXIT

# The JNI function declarations DJL's sources include: generated from PyTorchLibrary.java.
header=ai_djl_pytorch_jni_PyTorchLibrary.h
hdir=${DJL_JNI_HEADER_DIR:-$native/build/include}
if [ ! -f "$hdir/$header" ]; then
  java_src=$djl_src/engines/pytorch/pytorch-engine/src/main/java
  javac=${JAVA_HOME:+$JAVA_HOME/bin/}javac
  command -v "$javac" >/dev/null && [ -f "$java_src/ai/djl/pytorch/jni/PyTorchLibrary.java" ] \
    || fail "no $header in ${DJL_JNI_HEADER_DIR:-$native/build/include} and no javac + DJL Java sources to generate it (scripts/gpu/jni-headers.sh makes it on a machine with a JDK)"
  hdir=$work/include
  "$javac" -sourcepath "$java_src" "$java_src/ai/djl/pytorch/jni/PyTorchLibrary.java" -h "$hdir" -d "$work/classes"
fi
hdir=$(cd "$hdir" && pwd)

has_cuda=0; [ -e "$torch_dir/lib/libtorch_cuda.so" ] && has_cuda=1
use_cuda=${DJL_JNI_USE_CUDA:-$has_cuda}
mode=${DJL_JNI_BUILD:-cmake}
lib=

build_cmake() {
  command -v cmake >/dev/null || { echo "build-djl-jni: cmake not on PATH" >&2; return 1; }
  local cuda_root=()
  [ "$use_cuda" = 1 ] && [ -d /usr/local/cuda ] && cuda_root=(-DCUDAToolkit_ROOT=/usr/local/cuda)
  # FindJNI wants a JVM library; the JNI links none (the JVM provides the symbols at load time).
  if ! cmake -S "$native" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$torch_dir" \
      -DJAVA_INCLUDE_PATH="$jni_h" -DJAVA_INCLUDE_PATH2="$jni_md_h" -DJAVA_JVM_LIBRARY=NotNeeded \
      -DJAVA_AWT_INCLUDE_PATH=NotNeeded -DJAVA_AWT_LIBRARY=NotNeeded \
      -DCMAKE_CXX_FLAGS="-I$hdir" -DUSE_CUDA="$([ "$use_cuda" = 1 ] && echo 1)" "${cuda_root[@]}" \
      >"$work/cmake.log" 2>&1; then
    tail -25 "$work/cmake.log" >&2
    return 1
  fi
  cmake --build "$work/build" --config Release -j "$jobs"
  lib=$work/build/libdjl_torch.so
}

build_gxx() {
  # The same sources, compiled and linked directly against libtorch's headers and libraries.
  local abi=0 objs=() f cuda_libs=()
  nm -D --defined-only "$torch_dir/lib/libc10.so" 2>/dev/null | grep -q __cxx11 && abi=1
  mkdir -p "$work/obj"
  for f in "$native"/src/main/native/*.cc; do
    g++ -std=c++17 -O2 -fPIC -D_GLIBCXX_USE_CXX11_ABI=$abi -w \
      -I"$hdir" -I"$jni_h" -I"$jni_md_h" -I"$utils" \
      -I"$torch_dir/include" -I"$torch_dir/include/torch/csrc/api/include" \
      -c "$f" -o "$work/obj/$(basename "$f" .cc).o" &
    objs+=("$work/obj/$(basename "$f" .cc).o")
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
  done
  wait
  for f in "${objs[@]}"; do [ -f "$f" ] || fail "compiling $(basename "$f" .o).cc failed"; done
  [ "$has_cuda" = 1 ] && cuda_libs=(-ltorch_cuda -lc10_cuda)
  g++ -shared -o "$work/libdjl_torch.so" "${objs[@]}" -L"$torch_dir/lib" \
    -Wl,--no-as-needed -ltorch -ltorch_cpu "${cuda_libs[@]}" -lc10 -Wl,-rpath,'$ORIGIN'
  lib=$work/libdjl_torch.so
}

case $mode in
  cmake)
    if ! build_cmake; then
      echo "build-djl-jni: CMake could not configure DJL's build against $torch_dir (log above);" \
           "building the same sources with g++ directly, without USE_CUDA" >&2
      use_cuda=0; build_gxx
    fi ;;
  gxx) [ "$use_cuda" = 1 ] && echo "build-djl-jni: the g++ build leaves out DJL's USE_CUDA extras" >&2
       use_cuda=0; build_gxx ;;
  *) fail "DJL_JNI_BUILD must be cmake or gxx, not '$mode'" ;;
esac

[ -f "$lib" ] || fail "no libdjl_torch.so was produced"
case $out in *.so) mkdir -p "$(dirname "$out")" ;; *) mkdir -p "$out"; out=$out/libdjl_torch.so ;; esac
cp "$lib" "$out"
echo "build-djl-jni: wrote $out (against $torch_dir, USE_CUDA=$use_cuda, $mode build)"
