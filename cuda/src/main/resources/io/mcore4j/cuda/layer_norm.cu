// mcore4j's LayerNorm over the last dim of rows of up to 32 * CACHED * 8 columns, forward and the input gradient plus
// a residual gradient (compiled at run time by NVRTC: io.mcore4j.cuda.CudaLayerNorm).
//
// layer_norm_forward_*: per row of x [rows, cols] (float16 or bfloat16), in float32: mean, the biased variance
// as the mean of squared deviations (two passes over the row held in registers), rstd = 1 / sqrt(var + eps), and
// out = (x - mean) * rstd * w + b rounded to x's dtype; mean and rstd are written as float32 [rows].
//
// layer_norm_input_gradient_plus_*: for each row of x [rows, cols] (float16 or bfloat16) normalised over its cols with
// float32 mean and rstd [rows], and dn the gradient of the normalised output (before the affine weight w [cols], in
// x's dtype): dx = rstd * (g - mean_cols(g) - xhat * mean_cols(g * xhat)) with g = dn * w and xhat = (x - mean) * rstd
// (float32), and out = dy + dx rounded once to x's dtype: the gradient of a pre-norm block's input when dy is the
// gradient its residual branch carries. One warp per row, 8 elements per lane at a time; cols a multiple of 8 and
// every row 16-byte aligned (checked by the caller). A lane loads all its vectors of a row before any arithmetic and
// keeps them in registers, so each row is read from memory once.

#define THREADS 256
#define WARPS (THREADS / 32)
#define CACHED 8

#include "mcore4j_cuda.cuh"

template <int T>
__device__ void forward(const uint4* __restrict__ x, const uint4* __restrict__ weight, const uint4* __restrict__ bias,
    uint4* __restrict__ out, float* __restrict__ mean, float* __restrict__ rstd, long long rows, long long cols, float eps) {
  long long row = blockIdx.x * (long long) WARPS + threadIdx.x / 32;
  if (row >= rows) {
    return;
  }
  int lane = threadIdx.x % 32;
  long long vectors = cols / 8;
  long long base = row * vectors;
  uint4 xv[CACHED];
#pragma unroll
  for (int k = 0; k < CACHED; k++) {
    long long v = lane + 32 * k;
    if (v < vectors) {
      xv[k] = x[base + v];
    }
  }
  float sum = 0.f;
#pragma unroll
  for (int k = 0; k < CACHED; k++) {
    if (lane + 32 * k < vectors) {
      float b[8];
      unpack8<T>(xv[k], b);
      for (int i = 0; i < 8; i++) {
        sum += b[i];
      }
    }
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    sum += __shfl_xor_sync(0xffffffff, sum, offset);
  }
  float mu = sum / (float) cols;
  float squares = 0.f;
#pragma unroll
  for (int k = 0; k < CACHED; k++) {
    if (lane + 32 * k < vectors) {
      float b[8];
      unpack8<T>(xv[k], b);
      for (int i = 0; i < 8; i++) {
        float d = b[i] - mu;
        squares += d * d;
      }
    }
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    squares += __shfl_xor_sync(0xffffffff, squares, offset);
  }
  float rs = 1.0f / sqrtf(squares / (float) cols + eps);
  if (lane == 0) {
    mean[row] = mu;
    rstd[row] = rs;
  }
#pragma unroll
  for (int k = 0; k < CACHED; k++) {
    long long v = lane + 32 * k;
    if (v < vectors) {
      float b[8], w[8], c[8], o[8];
      unpack8<T>(xv[k], b);
      unpack8<T>(weight[v], w);
      unpack8<T>(bias[v], c);
      for (int i = 0; i < 8; i++) {
        o[i] = (b[i] - mu) * rs * w[i] + c[i];
      }
      out[base + v] = pack8<T>(o);
    }
  }
}

extern "C" __global__ void __launch_bounds__(THREADS) layer_norm_forward_f16(const uint4* x, const uint4* weight,
    const uint4* bias, uint4* out, float* mean, float* rstd, long long rows, long long cols, float eps) {
  forward<1>(x, weight, bias, out, mean, rstd, rows, cols, eps);
}
extern "C" __global__ void __launch_bounds__(THREADS) layer_norm_forward_bf16(const uint4* x, const uint4* weight,
    const uint4* bias, uint4* out, float* mean, float* rstd, long long rows, long long cols, float eps) {
  forward<2>(x, weight, bias, out, mean, rstd, rows, cols, eps);
}

template <int T>
__device__ void input_gradient_plus(const uint4* __restrict__ dn, const uint4* __restrict__ x,
    const float* __restrict__ mean, const float* __restrict__ rstd, const uint4* __restrict__ weight,
    const uint4* __restrict__ dy, uint4* __restrict__ out, long long rows, long long cols) {
  long long row = blockIdx.x * (long long) WARPS + threadIdx.x / 32;
  if (row >= rows) {
    return;
  }
  int lane = threadIdx.x % 32;
  long long vectors = cols / 8;
  long long base = row * vectors;
  uint4 dnv[CACHED], xv[CACHED], dyv[CACHED];
#pragma unroll
  for (int k = 0; k < CACHED; k++) {
    long long v = lane + 32 * k;
    if (v < vectors) {
      dnv[k] = dn[base + v];
      xv[k] = x[base + v];
      dyv[k] = dy[base + v];
    }
  }
  float mu = mean[row], rs = rstd[row];
  float sumG = 0.f, sumGx = 0.f;
#pragma unroll
  for (int k = 0; k < CACHED; k++) {
    long long v = lane + 32 * k;
    if (v < vectors) {
      float a[8], b[8], c[8];
      unpack8<T>(dnv[k], a);
      unpack8<T>(xv[k], b);
      unpack8<T>(weight[v], c);
      for (int i = 0; i < 8; i++) {
        float g = a[i] * c[i];
        sumG += g;
        sumGx += g * ((b[i] - mu) * rs);
      }
    }
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    sumG += __shfl_xor_sync(0xffffffff, sumG, offset);
    sumGx += __shfl_xor_sync(0xffffffff, sumGx, offset);
  }
  float meanG = sumG / (float) cols, meanGx = sumGx / (float) cols;
#pragma unroll
  for (int k = 0; k < CACHED; k++) {
    long long v = lane + 32 * k;
    if (v < vectors) {
      float a[8], b[8], c[8], r[8], o[8];
      unpack8<T>(dnv[k], a);
      unpack8<T>(xv[k], b);
      unpack8<T>(weight[v], c);
      unpack8<T>(dyv[k], r);
      for (int i = 0; i < 8; i++) {
        float xhat = (b[i] - mu) * rs;
        o[i] = r[i] + rs * (a[i] * c[i] - meanG - xhat * meanGx);
      }
      out[base + v] = pack8<T>(o);
    }
  }
}

extern "C" __global__ void __launch_bounds__(THREADS) layer_norm_input_gradient_plus_f16(const uint4* dn,
    const uint4* x, const float* mean, const float* rstd, const uint4* weight, const uint4* dy, uint4* out, long long rows,
    long long cols) {
  input_gradient_plus<1>(dn, x, mean, rstd, weight, dy, out, rows, cols);
}
extern "C" __global__ void __launch_bounds__(THREADS) layer_norm_input_gradient_plus_bf16(const uint4* dn,
    const uint4* x, const float* mean, const float* rstd, const uint4* weight, const uint4* dy, uint4* out, long long rows,
    long long cols) {
  input_gradient_plus<2>(dn, x, mean, rstd, weight, dy, out, rows, cols);
}
