// mcore4j's cross-entropy kernels for logits on one rank (compiled at run time by NVRTC: io.mcore4j.cuda.CudaCrossEntropy).
//
// cross_entropy_forward_*: per row of logits [rows, vocab] (float16 or bfloat16), in float32, the log-sum-exp
// lse = max + log(sum(exp(x - max))) and the loss lse - x[target]; a target outside [0, vocab) gives a NaN loss.
// cross_entropy_backward_*: per row, (exp(x - lse) - onehot(target)) * g, rounded to the logits' dtype.
// One block of THREADS threads per row; each thread takes 8 consecutive logits at a time (one 16-byte load), so
// vocab must be a multiple of 8 and every row 16-byte aligned (checked by the caller).

#define THREADS 256
#define NEG_INF __int_as_float(0xff800000)

#include "mcore4j_cuda.cuh"

template <int T>
__device__ __forceinline__ float load1(const unsigned short* p) {
  return T == 1 ? half_to_float(*p) : bf16_to_float(*p);
}

// merges the running (max, sum of exp(x - max)) pair (om, os) into (m, s)
__device__ __forceinline__ void merge(float& m, float& s, float om, float os) {
  float nm = fmaxf(m, om);
  if (nm == NEG_INF) {
    return;
  }
  s = s * expf(m - nm) + os * expf(om - nm);
  m = nm;
}

template <int T>
__device__ void forward_row(const uint4* __restrict__ logits, const long long* __restrict__ target, float* __restrict__ loss,
    float* __restrict__ lse, long long vocab) {
  __shared__ float shm[THREADS / 32], shs[THREADS / 32];
  long long row = blockIdx.x;
  long long vectors = vocab / 8;
  const uint4* x = logits + row * vectors;
  float m = NEG_INF, s = 0.f;
  for (long long v = threadIdx.x; v < vectors; v += THREADS) {
    float e[8];
    unpack8<T>(x[v], e);
    float vm = e[0];
    for (int i = 1; i < 8; i++) {
      vm = fmaxf(vm, e[i]);
    }
    float vs = 0.f;
    for (int i = 0; i < 8; i++) {
      vs += expf(e[i] - vm);
    }
    merge(m, s, vm, vs);
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    float om = __shfl_xor_sync(0xffffffff, m, offset);
    float os = __shfl_xor_sync(0xffffffff, s, offset);
    merge(m, s, om, os);
  }
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    shm[warp] = m;
    shs[warp] = s;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    m = shm[0];
    s = shs[0];
    for (int w = 1; w < THREADS / 32; w++) {
      merge(m, s, shm[w], shs[w]);
    }
    float l = m + logf(s);
    lse[row] = l;
    long long t = target[row];
    loss[row] = t >= 0 && t < vocab ? l - load1<T>((const unsigned short*) x + t) : __int_as_float(0x7fc00000);
  }
}

template <int T>
__device__ void backward_row(const uint4* __restrict__ logits, const long long* __restrict__ target, const float* __restrict__ lse,
    const float* __restrict__ grad, uint4* __restrict__ out, long long vocab) {
  long long row = blockIdx.x;
  long long vectors = vocab / 8;
  const uint4* x = logits + row * vectors;
  uint4* y = out + row * vectors;
  float l = lse[row], g = grad[row];
  long long t = target[row];
  for (long long v = threadIdx.x; v < vectors; v += THREADS) {
    float e[8];
    unpack8<T>(x[v], e);
    unsigned int w[4];
    for (int i = 0; i < 4; i++) {
      long long c = v * 8 + 2 * i;
      float lo = (expf(e[2 * i] - l) - (c == t ? 1.f : 0.f)) * g;
      float hi = (expf(e[2 * i + 1] - l) - (c + 1 == t ? 1.f : 0.f)) * g;
      unsigned short a = T == 1 ? float_to_half(lo) : float_to_bf16(lo);
      unsigned short b = T == 1 ? float_to_half(hi) : float_to_bf16(hi);
      w[i] = a | ((unsigned int) b << 16);
    }
    y[v] = make_uint4(w[0], w[1], w[2], w[3]);
  }
}

extern "C" __global__ void __launch_bounds__(THREADS) cross_entropy_forward_f16(const uint4* logits, const long long* target,
    float* loss, float* lse, long long vocab) {
  forward_row<1>(logits, target, loss, lse, vocab);
}
extern "C" __global__ void __launch_bounds__(THREADS) cross_entropy_forward_bf16(const uint4* logits, const long long* target,
    float* loss, float* lse, long long vocab) {
  forward_row<2>(logits, target, loss, lse, vocab);
}
extern "C" __global__ void __launch_bounds__(THREADS) cross_entropy_backward_f16(const uint4* logits, const long long* target,
    const float* lse, const float* grad, uint4* out, long long vocab) {
  backward_row<1>(logits, target, lse, grad, out, vocab);
}
extern "C" __global__ void __launch_bounds__(THREADS) cross_entropy_backward_bf16(const uint4* logits, const long long* target,
    const float* lse, const float* grad, uint4* out, long long vocab) {
  backward_row<2>(logits, target, lse, grad, out, vocab);
}
