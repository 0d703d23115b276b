// mcore4j's fused master-weight Adam step (compiled at run time by NVRTC: io.mcore4j.cuda.CudaMasterAdam).
//
// A launch works on up to MAX_SEGMENTS parameters of one gradient bucket. Each parameter is a
// segment: its gradient where the model left it (float32, float16 or bfloat16; none = zeros), its
// model tensor (written with the updated weights, rounded to its dtype), and its range in the
// bucket's flat float32 master weights and moments. Block b works on CHUNK elements of the
// segment whose firstBlock is the largest one <= b.
//
// Four elements per access where the segment's tensors are aligned to it (vectorizable), else one.
//
// sum_squares_*: per block, the sum over its elements of g*g (counted buckets) or of g-g (the
// others: 0 for finite values, NaN otherwise, so that inf/NaN is still seen), in float64, written
// to partials[blockIdx.x]; the caller sums the partials in a fixed order (deterministic).
// adam_*: torch.optim.Adam/AdamW's update (torch's fused kernel's order of operations) on the
// gradient divided by grad_divisor (loss scale over clip coefficient); master, moments and the
// model tensor are written, the gradient is only read.

#define MAX_SEGMENTS 64
#define CHUNK 4096
#define THREADS 256

struct Segment {
  unsigned long long grad;   // gradient address, 0 when the parameter has no gradient (zeros)
  unsigned long long param;  // model tensor address, written with the updated weights; 0: not written
  long long numel;
  long long offset;          // of the segment's first element in the flat master and moments
  long long firstBlock;      // first block of the launch working on this segment
};

struct Table {
  long long count;
  Segment seg[MAX_SEGMENTS];
};

#include "mcore4j_cuda.cuh"

// whether a segment's tensors allow four-element accesses: 16-byte aligned float32 master range,
// gradient and model tensor aligned to four of their elements
template <int G, int P>
__device__ __forceinline__ bool vectorizable(const Segment& s) {
  return (s.offset & 3) == 0 && (s.grad & (G == 0 ? 15 : 7)) == 0 && (s.param & (P == 0 ? 15 : 7)) == 0;
}

template <int G>
__device__ void sum_squares(const Table& t, int counted, double* partials) {
  const Segment s = t.seg[segment_of(t, blockIdx.x)];
  long long start = (blockIdx.x - s.firstBlock) * (long long) CHUNK;
  long long end = min(start + (long long) CHUNK, s.numel);
  float acc = 0.f;
  if (s.grad != 0 && (s.grad & (G == 0 ? 15 : 7)) == 0) {
#pragma unroll
    for (int k = 0; k < CHUNK / (4 * THREADS); k++) {
      long long i = start + 4 * (k * THREADS + threadIdx.x);
      if (i + 3 < end) {
        float4 g = load4<G>(s.grad, i);
        acc += counted ? g.x * g.x + g.y * g.y + g.z * g.z + g.w * g.w : (g.x - g.x) + (g.y - g.y) + (g.z - g.z) + (g.w - g.w);
      } else {
        for (long long e = i; e < end; e++) {
          float g = load<G>(s.grad, e);
          acc += counted ? g * g : (g - g);
        }
      }
    }
  } else if (s.grad != 0) {
#pragma unroll 4
    for (int k = 0; k < CHUNK / THREADS; k++) {
      long long i = start + k * THREADS + threadIdx.x;
      if (i < end) {
        float g = load<G>(s.grad, i);
        acc += counted ? g * g : (g - g);
      }
    }
  }
  for (int o = 16; o > 0; o >>= 1) {
    acc += __shfl_down_sync(0xffffffffu, acc, o);
  }
  __shared__ float warps[THREADS / 32];
  if ((threadIdx.x & 31) == 0) {
    warps[threadIdx.x >> 5] = acc;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0;
    for (int w = 0; w < THREADS / 32; w++) {
      total += (double) warps[w];
    }
    partials[blockIdx.x] = total;
  }
}

struct AdamArgs {
  float lr, beta1, beta2, eps, weight_decay, step_size, bias_correction2_sqrt, grad_divisor;
  int decoupled;
};

// one element: torch's fused Adam order of operations; returns the new weight, updates m and v
__device__ __forceinline__ float adam_element(const AdamArgs& a, float g, float p, float& m, float& v) {
  g = g / a.grad_divisor;
  if (a.weight_decay != 0.f) {
    if (a.decoupled) {
      p -= a.lr * a.weight_decay * p;
    } else {
      g += p * a.weight_decay;
    }
  }
  m = a.beta1 * m + (1.f - a.beta1) * g;
  v = a.beta2 * v + (1.f - a.beta2) * g * g;
  float denom = (sqrtf(v) / a.bias_correction2_sqrt) + a.eps;
  return p - a.step_size * m / denom;
}

// element i of a segment, one at a time
template <int G, int P>
__device__ __forceinline__ void adam_one(const Segment& s, long long i, float* master, float* exp_avg, float* exp_avg_sq,
                                         const AdamArgs& a) {
  long long j = s.offset + i;
  float g = s.grad != 0 ? load<G>(s.grad, i) : 0.f;
  float m = exp_avg[j];
  float v = exp_avg_sq[j];
  float p = adam_element(a, g, master[j], m, v);
  master[j] = p;
  exp_avg[j] = m;
  exp_avg_sq[j] = v;
  if (s.param != 0) {
    store<P>(s.param, i, p);
  }
}

template <int G, int P>
__device__ void adam(const Table& t, float* master, float* exp_avg, float* exp_avg_sq, const AdamArgs& a) {
  const Segment s = t.seg[segment_of(t, blockIdx.x)];
  long long start = (blockIdx.x - s.firstBlock) * (long long) CHUNK;
  long long end = min(start + (long long) CHUNK, s.numel);
  if (vectorizable<G, P>(s)) {
    float4* m4 = reinterpret_cast<float4*>(exp_avg + s.offset);
    float4* v4 = reinterpret_cast<float4*>(exp_avg_sq + s.offset);
    float4* p4 = reinterpret_cast<float4*>(master + s.offset);
#pragma unroll
    for (int k = 0; k < CHUNK / (4 * THREADS); k++) {
      long long i = start + 4 * (k * THREADS + threadIdx.x);
      if (i + 3 < end) {
        float4 g = s.grad != 0 ? load4<G>(s.grad, i) : make_float4(0.f, 0.f, 0.f, 0.f);
        float4 p = p4[i >> 2];
        float4 m = m4[i >> 2];
        float4 v = v4[i >> 2];
        p.x = adam_element(a, g.x, p.x, m.x, v.x);
        p.y = adam_element(a, g.y, p.y, m.y, v.y);
        p.z = adam_element(a, g.z, p.z, m.z, v.z);
        p.w = adam_element(a, g.w, p.w, m.w, v.w);
        p4[i >> 2] = p;
        m4[i >> 2] = m;
        v4[i >> 2] = v;
        if (s.param != 0) {
          store4<P>(s.param, i, p);
        }
      } else {
        for (long long e = i; e < end; e++) {
          adam_one<G, P>(s, e, master, exp_avg, exp_avg_sq, a);
        }
      }
    }
    return;
  }
#pragma unroll 4
  for (int k = 0; k < CHUNK / THREADS; k++) {
    long long i = start + k * THREADS + threadIdx.x;
    if (i < end) {
      adam_one<G, P>(s, i, master, exp_avg, exp_avg_sq, a);
    }
  }
}

#define SUM_SQUARES(NAME, G) \
  extern "C" __global__ void __launch_bounds__(THREADS) NAME(Table t, int counted, double* partials) { \
    sum_squares<G>(t, counted, partials); \
  }
SUM_SQUARES(sum_squares_f32, 0)
SUM_SQUARES(sum_squares_f16, 1)
SUM_SQUARES(sum_squares_bf16, 2)

#define ADAM(NAME, G, P) \
  extern "C" __global__ void __launch_bounds__(THREADS) NAME(Table t, float* master, float* exp_avg, \
      float* exp_avg_sq, float lr, float beta1, float beta2, float eps, float weight_decay, int decoupled, \
      float step_size, float bias_correction2_sqrt, float grad_divisor) { \
    AdamArgs a = {lr, beta1, beta2, eps, weight_decay, step_size, bias_correction2_sqrt, grad_divisor, decoupled}; \
    adam<G, P>(t, master, exp_avg, exp_avg_sq, a); \
  }
// gradient dtype, model dtype
ADAM(adam_f32_f32, 0, 0)
ADAM(adam_f32_f16, 0, 1)
ADAM(adam_f32_bf16, 0, 2)
ADAM(adam_f16_f16, 1, 1)
ADAM(adam_bf16_bf16, 2, 2)
