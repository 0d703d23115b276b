#!/bin/bash
# stage-gpu-check.sh: builds the NCCL backend and its GPU check here (no GPU needed) and copies the
# runtime jars to nccl/target/gpu-check-lib (about 17 MB; DJL's 107 MB CPU libtorch and JUnit are
# left out: the GPU host's libtorch replaces the former). Run from the repository root. Carry
# nccl/target/classes, nccl/target/test-classes and nccl/target/gpu-check-lib to the GPU host.
set -euo pipefail
mvn -B -o -q -pl nccl test-compile
rm -rf nccl/target/gpu-check-lib
mvn -B -o -q -pl nccl dependency:copy-dependencies -DincludeScope=test \
  -DoutputDirectory=target/gpu-check-lib \
  -DexcludeArtifactIds=pytorch-native-cpu,junit-jupiter,junit-jupiter-api,junit-jupiter-engine,junit-jupiter-params,junit-platform-commons,junit-platform-engine,opentest4j,apiguardian-api \
  -DexcludeClassifiers=tests
echo "staged $(ls nccl/target/gpu-check-lib | wc -l) jars ($(du -sh nccl/target/gpu-check-lib | cut -f1)) in nccl/target/gpu-check-lib"
