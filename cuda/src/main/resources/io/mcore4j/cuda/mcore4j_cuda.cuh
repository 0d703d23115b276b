// Shared by mcore4j's CUDA sources (io.mcore4j.cuda.RuntimeCompiledModule puts it in place of their #include):
// conversions between float and the 2-byte float types, written with PTX so that no CUDA header is needed, and
// 8 elements of a 2-byte type (T 1: float16, 2: bfloat16) in one 16-byte vector as floats and back, and one or four
// elements of a tensor of any of the three (T 0: float32) at a device address as floats and back.

#pragma once

__device__ __forceinline__ float half_to_float(unsigned short h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}

__device__ __forceinline__ unsigned short float_to_half(float f) {
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}

__device__ __forceinline__ float bf16_to_float(unsigned short b) {
  return __uint_as_float(((unsigned int) b) << 16);
}

__device__ __forceinline__ unsigned short float_to_bf16(float f) {
  unsigned short b;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(b) : "f"(f));
  return b;
}

template <int T>
__device__ __forceinline__ void unpack8(uint4 raw, float* v) {
  unsigned int w[4] = {raw.x, raw.y, raw.z, raw.w};
  for (int i = 0; i < 4; i++) {
    unsigned short lo = w[i] & 0xffff, hi = w[i] >> 16;
    v[2 * i] = T == 1 ? half_to_float(lo) : bf16_to_float(lo);
    v[2 * i + 1] = T == 1 ? half_to_float(hi) : bf16_to_float(hi);
  }
}

template <int T>
__device__ __forceinline__ uint4 pack8(const float* v) {
  unsigned int w[4];
  for (int i = 0; i < 4; i++) {
    unsigned short lo = T == 1 ? float_to_half(v[2 * i]) : float_to_bf16(v[2 * i]);
    unsigned short hi = T == 1 ? float_to_half(v[2 * i + 1]) : float_to_bf16(v[2 * i + 1]);
    w[i] = lo | ((unsigned int) hi << 16);
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// element i of a tensor at address base, of dtype T (0 float32, 1 float16, 2 bfloat16), as a float and back
template <int T>
__device__ __forceinline__ float load(unsigned long long base, long long i) {
  if (T == 0) {
    return reinterpret_cast<const float*>(base)[i];
  }
  unsigned short raw = reinterpret_cast<const unsigned short*>(base)[i];
  return T == 1 ? half_to_float(raw) : bf16_to_float(raw);
}

template <int T>
__device__ __forceinline__ void store(unsigned long long base, long long i, float v) {
  if (T == 0) {
    reinterpret_cast<float*>(base)[i] = v;
  } else {
    reinterpret_cast<unsigned short*>(base)[i] = T == 1 ? float_to_half(v) : float_to_bf16(v);
  }
}

// four consecutive elements at element index i (a multiple of 4) of an aligned tensor
template <int T>
__device__ __forceinline__ float4 load4(unsigned long long base, long long i) {
  if (T == 0) {
    return reinterpret_cast<const float4*>(base)[i >> 2];
  }
  uint2 raw = reinterpret_cast<const uint2*>(base)[i >> 2];
  unsigned short h0 = raw.x & 0xffff, h1 = raw.x >> 16, h2 = raw.y & 0xffff, h3 = raw.y >> 16;
  if (T == 1) {
    return make_float4(half_to_float(h0), half_to_float(h1), half_to_float(h2), half_to_float(h3));
  }
  return make_float4(bf16_to_float(h0), bf16_to_float(h1), bf16_to_float(h2), bf16_to_float(h3));
}

template <int T>
__device__ __forceinline__ void store4(unsigned long long base, long long i, float4 v) {
  if (T == 0) {
    reinterpret_cast<float4*>(base)[i >> 2] = v;
    return;
  }
  unsigned short h0 = T == 1 ? float_to_half(v.x) : float_to_bf16(v.x);
  unsigned short h1 = T == 1 ? float_to_half(v.y) : float_to_bf16(v.y);
  unsigned short h2 = T == 1 ? float_to_half(v.z) : float_to_bf16(v.z);
  unsigned short h3 = T == 1 ? float_to_half(v.w) : float_to_bf16(v.w);
  reinterpret_cast<uint2*>(base)[i >> 2] = make_uint2(h0 | ((unsigned int) h1 << 16), h2 | ((unsigned int) h3 << 16));
}

// the segment of a launch's table (count, seg[] with firstBlock ascending) that block works on: the last one whose
// firstBlock is <= block
template <typename Launch>
__device__ __forceinline__ int segment_of(const Launch& t, long long block) {
  int lo = 0;
  int hi = (int) t.count - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) >> 1;
    if (t.seg[mid].firstBlock <= block) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}
