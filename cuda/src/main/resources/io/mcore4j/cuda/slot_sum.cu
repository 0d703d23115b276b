// mcore4j's sum of equal slots (compiled at run time by NVRTC: io.mcore4j.cuda.SlotSum): out[i] = in[i] +
// in[stride + i] + ... over `slots` slots, summed in slot order in float32, 16 bytes per thread (8 float16 or
// bfloat16 elements, 4 float32). The reduction of mcore4j's copy-engine all-reduce (io.mcore4j.parallel.nccl.PeerCopies):
// slot k holds member k's part, and out may be one of the slots (each thread reads its element of every slot before
// it writes). Addresses and the slot stride are 16-byte multiples (checked by the caller).

#include "mcore4j_cuda.cuh"

template <int T>
__device__ __forceinline__ void sum_slots_2byte(const uint4* in, uint4* out, long long slots, long long stride_vectors,
                                                long long vectors) {
  long long idx = blockIdx.x * (long long) blockDim.x + threadIdx.x;
  if (idx >= vectors) {
    return;
  }
  float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  for (long long k = 0; k < slots; k++) {
    float v[8];
    unpack8<T>(in[k * stride_vectors + idx], v);
    for (int j = 0; j < 8; j++) {
      acc[j] += v[j];
    }
  }
  out[idx] = pack8<T>(acc);
}

extern "C" __global__ void __launch_bounds__(256) sum_slots_half(
    const uint4* in, uint4* out, long long slots, long long stride_vectors, long long vectors) {
  sum_slots_2byte<1>(in, out, slots, stride_vectors, vectors);
}

extern "C" __global__ void __launch_bounds__(256) sum_slots_bf16(
    const uint4* in, uint4* out, long long slots, long long stride_vectors, long long vectors) {
  sum_slots_2byte<2>(in, out, slots, stride_vectors, vectors);
}

extern "C" __global__ void __launch_bounds__(256) sum_slots_float(
    const float4* in, float4* out, long long slots, long long stride_vectors, long long vectors) {
  long long idx = blockIdx.x * (long long) blockDim.x + threadIdx.x;
  if (idx >= vectors) {
    return;
  }
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  for (long long k = 0; k < slots; k++) {
    float4 v = in[k * stride_vectors + idx];
    acc.x += v.x;
    acc.y += v.y;
    acc.z += v.z;
    acc.w += v.w;
  }
  out[idx] = acc;
}
