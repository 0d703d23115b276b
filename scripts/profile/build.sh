#!/bin/bash
# Builds the CUPTI kernel tracer (cupti_trace.cpp) into the path given as $1, against the CUDA
# toolkit's CUPTI on the GPU host. Usage: scripts/profile/build.sh /tmp/libcupti_trace.so
set -e
out=${1:?usage: build.sh OUTPUT.so}
for d in /usr/local/cuda/extras/CUPTI /usr/local/cuda /usr/local/cuda/targets/x86_64-linux; do
  inc=$(find "$d" -name cupti.h 2>/dev/null | head -1)
  lib=$(find "$d" -name 'libcupti.so*' 2>/dev/null | head -1)
  if [ -n "$inc" ] && [ -n "$lib" ]; then break; fi
done
if [ -z "$inc" ] || [ -z "$lib" ]; then
  echo "no CUPTI (cupti.h and libcupti.so) under /usr/local/cuda" >&2
  exit 1
fi
g++ -O2 -shared -fPIC -o "$out" "$(dirname "$0")/cupti_trace.cpp" -I"$(dirname "$inc")" -I/usr/local/cuda/include \
  -L"$(dirname "$lib")" -Wl,-rpath,"$(dirname "$lib")" -lcupti
