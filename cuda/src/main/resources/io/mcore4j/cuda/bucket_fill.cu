// mcore4j's gradient bucket fill (compiled at run time by NVRTC: io.mcore4j.cuda.CudaBucketFill).
//
// fill_<S>_<D>: writes each segment's source (float32, float16 or bfloat16; none = zeros) into the flat
// bucket at the segment's offset, multiplied by scale in float32 and rounded once to the bucket's dtype:
// dst[offset + i] = D(float(src[i]) * scale). One pass where the composed form makes up to three (the
// gradients concatenated, the concatenation cast into the bucket, the bucket multiplied in place). A launch
// takes up to MAX_SEGMENTS segments; block b works on CHUNK elements of the segment whose firstBlock is the
// largest one <= b. Four elements per access where both ends are aligned to four of their elements.

#define MAX_SEGMENTS 64
#define CHUNK 4096
#define THREADS 256

struct Segment {
  unsigned long long src;  // source address, 0 for zeros
  long long numel;
  long long offset;        // of the segment's first element in the bucket
  long long firstBlock;    // first block of the launch working on this segment
};

struct Table {
  long long count;
  Segment seg[MAX_SEGMENTS];
};

#include "mcore4j_cuda.cuh"

template <int S, int D>
__device__ void fill(const Table& t, unsigned long long dst, float scale) {
  const Segment s = t.seg[segment_of(t, blockIdx.x)];
  long long start = (blockIdx.x - s.firstBlock) * (long long) CHUNK;
  long long end = min(start + (long long) CHUNK, s.numel);
  unsigned long long out = dst + (unsigned long long) s.offset * (D == 0 ? 4 : 2);
  bool aligned = (out & (D == 0 ? 15 : 7)) == 0 && (s.src & (S == 0 ? 15 : 7)) == 0;
  if (aligned) {
#pragma unroll
    for (int k = 0; k < CHUNK / (4 * THREADS); k++) {
      long long i = start + 4 * (k * THREADS + threadIdx.x);
      if (i + 3 < end) {
        float4 v = s.src != 0 ? load4<S>(s.src, i) : make_float4(0.f, 0.f, 0.f, 0.f);
        store4<D>(out, i, make_float4(v.x * scale, v.y * scale, v.z * scale, v.w * scale));
      } else {
        for (long long e = i; e < end; e++) {
          store<D>(out, e, s.src != 0 ? load<S>(s.src, e) * scale : 0.f);
        }
      }
    }
    return;
  }
#pragma unroll 4
  for (int k = 0; k < CHUNK / THREADS; k++) {
    long long i = start + k * THREADS + threadIdx.x;
    if (i < end) {
      store<D>(out, i, s.src != 0 ? load<S>(s.src, i) * scale : 0.f);
    }
  }
}

#define FILL(NAME, S, D) \
  extern "C" __global__ void __launch_bounds__(THREADS) NAME(Table t, unsigned long long dst, float scale) { \
    fill<S, D>(t, dst, scale); \
  }
// source dtype, bucket dtype
FILL(fill_f32_f32, 0, 0)
FILL(fill_f16_f32, 1, 0)
FILL(fill_bf16_f32, 2, 0)
FILL(fill_f32_f16, 0, 1)
FILL(fill_f16_f16, 1, 1)
FILL(fill_bf16_f16, 2, 1)
FILL(fill_f32_bf16, 0, 2)
FILL(fill_f16_bf16, 1, 2)
FILL(fill_bf16_bf16, 2, 2)
