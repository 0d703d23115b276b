#!/usr/bin/env bash
# stage.sh DJL_SRC [GPU_DIR]
#
# Assembles GPU_DIR (default .gpu, git-ignored): everything a GPU host with Python torch, g++ and cmake
# but no Java, no Maven and no network needs to run mcore4j from this checkout:
#   jre.tar.xz     a jlinked Java runtime (scripts/gpu/pack-runtime.sh)
#   lib/*.jar      mcore4j's jars (mcore4j-cuda and mcore4j-nccl among them) and their runtime dependencies,
#                  without DJL's CPU libtorch (pytorch-native-cpu: the host's libtorch replaces it)
#   djl-src/       the DJL v0.35.1 sources the JNI build needs (native sources, CMakeLists.txt, utils.h)
#   jni-include/   jni.h, jni_md.h and DJL's generated ai_djl_pytorch_jni_PyTorchLibrary.h
#   scripts/       build-djl-jni.sh, build-cuda-graphs.sh, host-env.sh, eager_gpt_bench.py, torch_dist_gpt_bench.py
#   native/        the source of mcore4j's CUDA graph library (built on the host by run-on-host.sh)
#   pre/           kept from the GPU_DIR it replaces: libraries an earlier host built (run-on-host.sh's
#                  MCORE4J_PREBUILT_OUT), which a later host of the same torch version uses instead of building
#   run-on-host.sh the prologue to run on the host (see docs/gpu.md):
#                    source .gpu/run-on-host.sh && java $MCORE4J_JAVA_OPTS -cp "$CP" MAIN ARGS
#
# DJL_SRC: a DJL checkout (git clone -b v0.35.1 https://github.com/deepjavalibrary/djl) or a bare clone
# holding tag v0.35.1. Maven: $MVN (default ./mvnw, else mvn) with $MAVEN_OPTS; SKIP_BUILD=1 reuses the
# jars installed by an earlier `install`.
set -euo pipefail
usage="usage: stage.sh DJL_SRC [GPU_DIR]"
djl=${1:?$usage}
root=$(cd "$(dirname "$0")/../.." && pwd)
gpu=${2:-$root/.gpu}
here=$root/scripts/gpu
cd "$root"
mvn=${MVN:-}
[ -n "$mvn" ] || { [ -x ./mvnw ] && mvn=./mvnw || mvn=mvn; }

kept=
if [ -d "$gpu/pre" ]; then kept=$(mktemp -d) && mv "$gpu/pre" "$kept/"; fi
rm -rf "$gpu"; mkdir -p "$gpu/lib" "$gpu/scripts"
if [ -n "$kept" ]; then mv "$kept/pre" "$gpu/" && rmdir "$kept"; fi
src=$(mktemp -d); trap 'rm -rf "$src"' EXIT
# the DJL tree at v0.35.1: from a git repository (bare or not) by tag, else taken as it is
if git -C "$djl" rev-parse -q --verify 'v0.35.1^{commit}' >/dev/null 2>&1; then
  git -C "$djl" archive v0.35.1 api/src/main/native engines/pytorch/pytorch-native \
      engines/pytorch/pytorch-engine/src/main/java | tar x -C "$src"
else
  [ -f "$djl/engines/pytorch/pytorch-native/CMakeLists.txt" ] || { echo "stage: $djl is no DJL source tree" >&2; exit 1; }
  mkdir -p "$src/api/src/main" "$src/engines/pytorch/pytorch-engine/src/main"
  cp -r "$djl/api/src/main/native" "$src/api/src/main/"
  cp -r "$djl/engines/pytorch/pytorch-native" "$src/engines/pytorch/"
  cp -r "$djl/engines/pytorch/pytorch-engine/src/main/java" "$src/engines/pytorch/pytorch-engine/src/main/"
fi
"$here/jni-headers.sh" "$src" "$gpu/jni-include" >/dev/null
mkdir -p "$gpu/djl-src/api/src/main" "$gpu/djl-src/engines/pytorch/pytorch-native/src/main"
cp -r "$src/api/src/main/native" "$gpu/djl-src/api/src/main/"
cp "$src/engines/pytorch/pytorch-native/CMakeLists.txt" "$gpu/djl-src/engines/pytorch/pytorch-native/"
cp -r "$src/engines/pytorch/pytorch-native/src/main/native" "$gpu/djl-src/engines/pytorch/pytorch-native/src/main/"

if [ "${SKIP_BUILD:-0}" != 1 ]; then
  $mvn -B -q install -DskipTests -Dmaven.javadoc.skip=true
fi
$mvn -B -q -pl samples dependency:copy-dependencies -DincludeScope=runtime \
  -DexcludeArtifactIds=pytorch-native-cpu -DoutputDirectory="$gpu/lib"
cp samples/target/mcore4j-samples-*.jar "$gpu/lib/"
rm -f "$gpu"/lib/*-sources.jar "$gpu"/lib/*-javadoc.jar
# a GPU run needs both CUDA artifacts: the kernels (any number of GPUs) and NCCL (several)
for artifact in mcore4j-cuda mcore4j-nccl; do
  ls "$gpu"/lib/"$artifact"-*.jar >/dev/null 2>&1 || { echo "stage: $artifact is missing from $gpu/lib" >&2; exit 1; }
done
# the hosts are linux-x86_64: other platforms' natives, DJL's prebuilt CUDA JNI (the host builds its own) and
# JavaCPP's NPP bindings (image processing, which nothing here calls) go, so that the staged runtime with the
# tokenizers jar (SFT) fits the device tool's 64 MiB
strip() { # strip JAR PATTERN...: deletes the entries matching the patterns (a pattern matching nothing is fine)
  local jar=$1; shift
  for pattern in "$@"; do zip -q -d "$jar" "$pattern" >/dev/null 2>&1 || true; done
}
for jar in "$gpu"/lib/tokenizers-*.jar; do strip "$jar" 'native/lib/linux-aarch64/*' 'native/lib/win-*' 'native/lib/osx-*'; done
for jar in "$gpu"/lib/pytorch-jni-*.jar; do strip "$jar" 'jnilib/linux-aarch64/*' 'jnilib/osx-*' 'jnilib/win-*' 'jnilib/linux-x86_64/cu*'; done
for jar in "$gpu"/lib/cuda-*-linux-x86_64.jar; do strip "$jar" 'org/bytedeco/cuda/linux-x86_64/libjninpp*'; done

"$here/pack-runtime.sh" "$gpu" >/dev/null
cp "$here/build-djl-jni.sh" "$here/build-cuda-graphs.sh" "$here/host-env.sh" "$here/eager_gpt_bench.py" \
  "$here/torch_dist_gpt_bench.py" "$gpu/scripts/"
mkdir -p "$gpu/native" && cp "$root/cuda/src/main/native/cuda_graphs.cpp" "$gpu/native/"
cp "$here/run-on-host.sh" "$gpu/run-on-host.sh"
# the commit the jars were built from (and whether the tree had changes), for the scripts' report lines
echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!.gpu' 2>/dev/null || echo +changes)" >"$gpu/COMMIT"
echo "stage: $gpu ($(du -sh "$gpu" | cut -f1)): $(ls "$gpu/lib" | wc -l) jars, jre.tar.xz, DJL JNI sources and headers"
