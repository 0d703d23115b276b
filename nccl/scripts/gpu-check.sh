#!/bin/bash
# gpu-check.sh N [check args]: runs NcclCollectivesCheck on N GPUs with torchrun, from the repository
# root, after scripts/stage-gpu-check.sh. Needs the environment of /work/shared/gpu/host-env.sh
# (DJL on the host's libtorch; MCORE4J_JAVA_OPTS) and java on PATH (or JAVA=...).
set -euo pipefail
n=${1:?usage: gpu-check.sh N [--skip-large] [--timeout-s S]}; shift
cp="${MCORE4J_CP:-nccl/target/classes:nccl/target/test-classes:nccl/target/gpu-check-lib/*}"
export NCCL_NVLS_ENABLE=0
exec torchrun --standalone --nproc_per_node="$n" --no-python "${JAVA:-java}" ${MCORE4J_JAVA_OPTS:-} -cp "$cp" \
  io.mcore4j.parallel.nccl.NcclCollectivesCheck "$@"
