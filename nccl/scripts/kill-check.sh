#!/bin/bash
# kill-check.sh N K: starts N ranks of "NcclCollectivesCheck --kill-rank K" without torchrun (torchrun
# would kill the survivors as soon as rank K exits), from the repository root. Rank K must exit 17,
# every other rank 3 (a CommunicationException naming the group and the all-reduce within the 10 s
# timeout). Same environment as gpu-check.sh. Prints every rank's output and PASS or FAIL.
set -u
n=${1:?usage: kill-check.sh N K}; k=${2:?usage: kill-check.sh N K}
cp="${MCORE4J_CP:-nccl/target/classes:nccl/target/test-classes:nccl/target/gpu-check-lib/*}"
logs=$(mktemp -d)
port=${MASTER_PORT:-$((20000 + RANDOM % 20000))}
pids=()
for ((r = 0; r < n; r++)); do
  RANK=$r LOCAL_RANK=$r WORLD_SIZE=$n LOCAL_WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$port NCCL_NVLS_ENABLE=0 \
    timeout 120 "${JAVA:-java}" ${MCORE4J_JAVA_OPTS:-} -cp "$cp" io.mcore4j.parallel.nccl.NcclCollectivesCheck --kill-rank "$k" \
    >"$logs/rank$r.log" 2>&1 &
  pids+=($!)
done
ok=1
for ((r = 0; r < n; r++)); do
  wait "${pids[$r]}"; code=$?
  want=$([ "$r" -eq "$k" ] && echo 17 || echo 3)
  echo "---- rank $r exited $code (expected $want)"; cat "$logs/rank$r.log"
  [ "$code" -eq "$want" ] || ok=0
done
[ "$ok" -eq 1 ] && echo "kill check: PASS" || { echo "kill check: FAIL"; exit 1; }
