// Shared by mcore4j's CUDA sources (io.mcore4j.cuda.RuntimeCompiledModule puts it in place of their #include):
// conversions between float and the 2-byte float types, written with PTX so that no CUDA header is needed, and
// 8 elements of a 2-byte type (T 1: float16, 2: bfloat16) in one 16-byte vector as floats and back.

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
