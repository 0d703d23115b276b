// mcore4j's bias-gradient kernels for a transformer's MLP (compiled at run time by NVRTC:
// io.mcore4j.cuda.CudaBiasGradients).
//
// gelu_backward_colsum_*: dh = dy * gelu'(h) for the exact (erf) GELU, in libtorch's order of operations
// (float32 math, the result rounded to the tensors' dtype), written like h; and per block of GELU_ROWS rows,
// the column sums of the rounded dh in float32 into partials[rowBlock][col] (the caller sums the row
// blocks in a fixed order: the bias gradient of the layer before the GELU).
// column_sum_*: the same column sums of x alone, SUM_ROWS rows per block (the bias gradient of a linear
// layer from its output gradient).
// Tensors are [rows, cols] row-major and contiguous; cols a multiple of 8 and every row 16-byte aligned
// (checked by the caller). Thread t of a block owns 8 consecutive columns and walks the block's rows.

#define THREADS 128
#define GELU_ROWS 32
#define SUM_ROWS 64

#include "mcore4j_cuda.cuh"

// pack8 (mcore4j_cuda.cuh) that also gives the rounded values as floats
template <int T>
__device__ __forceinline__ uint4 pack8_rounded(const float* v, float* rounded) {
  unsigned int w[4];
  for (int i = 0; i < 4; i++) {
    unsigned short lo = T == 1 ? float_to_half(v[2 * i]) : float_to_bf16(v[2 * i]);
    unsigned short hi = T == 1 ? float_to_half(v[2 * i + 1]) : float_to_bf16(v[2 * i + 1]);
    rounded[2 * i] = T == 1 ? half_to_float(lo) : bf16_to_float(lo);
    rounded[2 * i + 1] = T == 1 ? half_to_float(hi) : bf16_to_float(hi);
    w[i] = lo | ((unsigned int) hi << 16);
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// the GELU's backward of 8 elements (float32 math in libtorch's order), rounded to T; adds the rounded values to sum
template <int T>
__device__ __forceinline__ uint4 gelu_backward8(uint4 hv, uint4 gv, float* sum) {
  const float kAlpha = 0.70710678118654752440f;
  const float kBeta = 0.39894228040143267794f;
  float x[8], g[8], out[8], rounded[8];
  unpack8<T>(hv, x);
  unpack8<T>(gv, g);
  for (int i = 0; i < 8; i++) {
    float cdf = 0.5f * (1.0f + erff(x[i] * kAlpha));
    float pdf = expf(-0.5f * x[i] * x[i]) * kBeta;
    out[i] = g[i] * (cdf + x[i] * pdf);
  }
  uint4 packed = pack8_rounded<T>(out, rounded);
  for (int i = 0; i < 8; i++) {
    sum[i] += rounded[i];
  }
  return packed;
}

// UNROLL rows per step: their loads are all issued before the first row's math, so that each thread keeps
// several loads in flight (one row at a time leaves the kernel waiting on memory latency). Rows are still
// added to the sums in order.
#define UNROLL 4

template <int T, bool GELU, int ROWS>
__device__ void bias_grad(const uint4* __restrict__ h, const uint4* __restrict__ dy, uint4* __restrict__ dh,
    float* __restrict__ partials, long long rows, long long cols) {
  long long vectors = cols / 8;
  long long col8 = blockIdx.x * (long long) THREADS + threadIdx.x;
  if (col8 >= vectors) {
    return;
  }
  long long first = blockIdx.y * (long long) ROWS;
  long long last = min(first + (long long) ROWS, rows);
  float sum[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  long long r = first;
  for (; r + UNROLL <= last; r += UNROLL) {
    uint4 gv[UNROLL], hv[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; u++) {
      long long at = (r + u) * vectors + col8;
      gv[u] = dy[at];
      if (GELU) {
        hv[u] = h[at];
      }
    }
#pragma unroll
    for (int u = 0; u < UNROLL; u++) {
      long long at = (r + u) * vectors + col8;
      if (GELU) {
        dh[at] = gelu_backward8<T>(hv[u], gv[u], sum);
      } else {
        float g[8];
        unpack8<T>(gv[u], g);
        for (int i = 0; i < 8; i++) {
          sum[i] += g[i];
        }
      }
    }
  }
  for (; r < last; r++) {
    long long at = r * vectors + col8;
    if (GELU) {
      dh[at] = gelu_backward8<T>(h[at], dy[at], sum);
    } else {
      float g[8];
      unpack8<T>(dy[at], g);
      for (int i = 0; i < 8; i++) {
        sum[i] += g[i];
      }
    }
  }
  float* row = partials + blockIdx.y * cols + col8 * 8;
  for (int i = 0; i < 8; i++) {
    row[i] = sum[i];
  }
}

extern "C" __global__ void __launch_bounds__(THREADS) gelu_backward_colsum_f16(const uint4* h, const uint4* dy, uint4* dh,
    float* partials, long long rows, long long cols) {
  bias_grad<1, true, GELU_ROWS>(h, dy, dh, partials, rows, cols);
}
extern "C" __global__ void __launch_bounds__(THREADS) gelu_backward_colsum_bf16(const uint4* h, const uint4* dy, uint4* dh,
    float* partials, long long rows, long long cols) {
  bias_grad<2, true, GELU_ROWS>(h, dy, dh, partials, rows, cols);
}
extern "C" __global__ void __launch_bounds__(THREADS) column_sum_f16(const uint4* x, float* partials, long long rows,
    long long cols) {
  bias_grad<1, false, SUM_ROWS>(nullptr, x, nullptr, partials, rows, cols);
}
extern "C" __global__ void __launch_bounds__(THREADS) column_sum_bf16(const uint4* x, float* partials, long long rows,
    long long cols) {
  bias_grad<2, false, SUM_ROWS>(nullptr, x, nullptr, partials, rows, cols);
}
