// Shared by mcore4j's CUDA sources (io.mcore4j.cuda.RuntimeCompiledModule puts it in place of their #include):
// conversions between float and the 2-byte float types, written with PTX so that no CUDA header is needed.

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
