// mcore4j's float8 casts for FP8 linears (compiled at run time by NVRTC: io.mcore4j.cuda.CudaFp8Cast), the fused
// form of the reference cast in scripts/make_fp8_linear_module.py:
//   q = fp8(clamp(float(x) * scale, -max, max)), max 448 (e4m3) or 57344 (e5m2), rounded to nearest even;
//   a NaN stays NaN with its sign (0x7f | sign, as libtorch's conversion writes it); inf saturates to +-max.
//
// fp8_cast_<T>_<E>: reads x [rows, cols] (T: f32, f16 or bf16) once and writes its float8 copy q [rows, cols]
// and, unless qt is 0, the transposed copy qt [cols, rows] (the operand layout the weight-gradient GEMM takes),
// both as bytes, scaled by *scale (a device float: delayed scaling's slot scale, or the tensorwise scale that
// fp8_current_scale wrote); unless amax is 0, max|x| is folded into *amax (atomicMax on the float's bits, which
// orders non-negative floats; |NaN| has the largest bits, so a NaN wins as torch.maximum propagates it).
// One block casts a TILE x TILE tile: coalesced 16-byte row reads, 8-byte row writes of q, and the tile's
// columns gathered from shared memory into 16-byte writes of qt.
// fp8_amax_<T>: max|x| of n elements into *amax (tensorwise scaling's first pass).
// fp8_current_scale: tensorwise scaling's scale from that amax, scale = max / amax (1 where amax is 0 or not
// finite; the largest float where the quotient is infinite), and its inverse 1 / scale.
//
// The caller checks: x contiguous and 16-byte aligned, rows and cols multiples of 16, q and qt 16-byte aligned.
// The float8 conversion is PTX's cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32 (sm_89 and newer).

#include "mcore4j_cuda.cuh"

#define THREADS 256
#define TILE 64
#define E4M3_MAX 448.0f
#define E5M2_MAX 57344.0f

// 8 elements of x at element offset i as floats (T 0: float32, 1: float16, 2: bfloat16)
template <int T>
__device__ __forceinline__ void load8(const void* __restrict__ x, long long i, float* v) {
  if (T == 0) {
    const float4* p = reinterpret_cast<const float4*>(reinterpret_cast<const float*>(x) + i);
    float4 a = p[0], b = p[1];
    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
    v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
  } else {
    uint4 raw = *reinterpret_cast<const uint4*>(reinterpret_cast<const unsigned short*>(x) + i);
    unpack8<T>(raw, v);
  }
}

// clamp to [-m, m] that lets a NaN through (fminf/fmaxf would drop it)
__device__ __forceinline__ float saturate(float v, float m) {
  return v > m ? m : (v < -m ? -m : v);
}

// two floats to float8 (E 0: e4m3, 1: e5m2): hi in the upper byte, lo in the lower, rounded to nearest even
template <int E>
__device__ __forceinline__ unsigned short to_fp8x2(float hi, float lo) {
  unsigned short d;
  if (E == 0) {
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(d) : "f"(hi), "f"(lo));
  } else {
    asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(d) : "f"(hi), "f"(lo));
  }
  return d;
}

// a NaN's byte as libtorch writes it: all exponent and mantissa bits, and the sign
__device__ __forceinline__ unsigned int nan_fixed(float v, unsigned int byte) {
  return v != v ? (0x7fu | ((__float_as_uint(v) >> 24) & 0x80u)) : byte;
}

// 8 scaled, saturated values to 8 float8 bytes, element 0 in the lowest byte
template <int E>
__device__ __forceinline__ uint2 cast8(const float* v, float s, unsigned char* bytes) {
  const float m = E == 0 ? E4M3_MAX : E5M2_MAX;
  unsigned int w[2] = {0, 0};
  for (int i = 0; i < 8; i += 2) {
    float a = saturate(v[i] * s, m);
    float b = saturate(v[i + 1] * s, m);
    unsigned short pair = to_fp8x2<E>(b, a);
    unsigned int lo = nan_fixed(a, pair & 0xffu);
    unsigned int hi = nan_fixed(b, pair >> 8);
    bytes[i] = (unsigned char) lo;
    bytes[i + 1] = (unsigned char) hi;
    w[i / 4] |= (lo | (hi << 8)) << (8 * (i % 4));
  }
  return make_uint2(w[0], w[1]);
}

// the bits of |v|: ordered as the floats are for non-negative values, a NaN above inf
__device__ __forceinline__ unsigned int abs_bits(float v) {
  return __float_as_uint(v) & 0x7fffffffu;
}

// folds this block's largest value of local into *amax (one atomic per block, none where *amax is already larger)
__device__ __forceinline__ void block_amax(unsigned int local, unsigned int* amax) {
  __shared__ unsigned int warp_max[THREADS / 32];
  local = __reduce_max_sync(0xffffffffu, local);
  if ((threadIdx.x & 31) == 0) {
    warp_max[threadIdx.x >> 5] = local;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned int m = warp_max[0];
    for (int i = 1; i < THREADS / 32; i++) {
      m = max(m, warp_max[i]);
    }
    if (m > *reinterpret_cast<volatile unsigned int*>(amax)) {
      atomicMax(amax, m);
    }
  }
}

template <int T, int E>
__device__ void cast_tile(const void* __restrict__ x, unsigned char* __restrict__ q, unsigned char* __restrict__ qt,
    const float* __restrict__ scale, unsigned int* __restrict__ amax, long long rows, long long cols) {
  // 4 bytes of padding per row: the column gathers below fall on different banks
  __shared__ unsigned char tile[TILE][TILE + 4];
  const float s = *scale;
  const long long r0 = (long long) blockIdx.y * TILE;
  const long long c0 = (long long) blockIdx.x * TILE;
  unsigned int local = 0;
  for (int i = threadIdx.x; i < TILE * TILE / 8; i += THREADS) {
    int r = i / (TILE / 8);
    int c = (i % (TILE / 8)) * 8;
    long long row = r0 + r, col = c0 + c;
    if (row < rows && col < cols) {
      float v[8];
      load8<T>(x, row * cols + col, v);
      for (int k = 0; k < 8; k++) {
        local = max(local, abs_bits(v[k]));
      }
      unsigned char bytes[8];
      *reinterpret_cast<uint2*>(q + row * cols + col) = cast8<E>(v, s, bytes);
      if (qt != nullptr) {
        for (int k = 0; k < 8; k++) {
          tile[r][c + k] = bytes[k];
        }
      }
    }
  }
  if (amax != nullptr) {
    block_amax(local, amax);
  }
  if (qt == nullptr) {
    return;
  }
  __syncthreads();
  // qt's row col holds the tile's column: 16 of its rows per thread, one 16-byte write
  for (int i = threadIdx.x; i < TILE * TILE / 16; i += THREADS) {
    int c = i / (TILE / 16);
    int r = (i % (TILE / 16)) * 16;
    long long col = c0 + c, row = r0 + r;
    if (col < cols && row < rows) {
      unsigned int w[4] = {0, 0, 0, 0};
      for (int k = 0; k < 16; k++) {
        w[k / 4] |= ((unsigned int) tile[r + k][c]) << (8 * (k % 4));
      }
      *reinterpret_cast<uint4*>(qt + col * rows + row) = make_uint4(w[0], w[1], w[2], w[3]);
    }
  }
}

template <int T>
__device__ void amax_of(const void* __restrict__ x, long long n, unsigned int* __restrict__ amax) {
  unsigned int local = 0;
  for (long long i = ((long long) blockIdx.x * THREADS + threadIdx.x) * 8; i < n; i += (long long) gridDim.x * THREADS * 8) {
    float v[8];
    load8<T>(x, i, v);
    for (int k = 0; k < 8; k++) {
      local = max(local, abs_bits(v[k]));
    }
  }
  block_amax(local, amax);
}

#define CAST(NAME, T, E)                                                                                            \
  extern "C" __global__ void __launch_bounds__(THREADS) NAME(const void* x, unsigned char* q, unsigned char* qt,   \
      const float* scale, unsigned int* amax, long long rows, long long cols) {                                     \
    cast_tile<T, E>(x, q, qt, scale, amax, rows, cols);                                                           \
  }

CAST(fp8_cast_f32_e4m3, 0, 0)
CAST(fp8_cast_f32_e5m2, 0, 1)
CAST(fp8_cast_f16_e4m3, 1, 0)
CAST(fp8_cast_f16_e5m2, 1, 1)
CAST(fp8_cast_bf16_e4m3, 2, 0)
CAST(fp8_cast_bf16_e5m2, 2, 1)

#define AMAX(NAME, T)                                                                                               \
  extern "C" __global__ void __launch_bounds__(THREADS) NAME(const void* x, long long n, unsigned int* amax) {      \
    amax_of<T>(x, n, amax);                                                                                         \
  }

AMAX(fp8_amax_f32, 0)
AMAX(fp8_amax_f16, 1)
AMAX(fp8_amax_bf16, 2)

// one thread: the reference's float32 arithmetic (IEEE division; NVRTC's default -prec-div=true)
extern "C" __global__ void fp8_current_scale(const float* amax, float fp8_max, float* scale, float* scale_inv) {
  float a = *amax;
  float s = fp8_max / a;
  if (!(a > 0.0f) || isinf(a) || a != a) {
    s = 1.0f;
  }
  if (isinf(s)) {
    s = 3.4028234663852886e38f;
  }
  *scale = s;
  *scale_inv = 1.0f / s;
}
