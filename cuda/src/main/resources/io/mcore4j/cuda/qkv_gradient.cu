// mcore4j's packing of attention's query/key/value gradients into the fused QKV projection's layout
// (compiled at run time by NVRTC: io.mcore4j.cuda.CudaQkvGradient).
//
// dq [s, b, heads, d], dk and dv [s, b, groups, d], all contiguous (fused attention's backward
// gives them in this order of strides), are interleaved into out [s, b, groups, heads/groups + 2, d],
// contiguous: per query group its query heads, then its key head, then its value head. The elements are only moved,
// 16 bytes per thread (any 2-byte or 4-byte dtype), so the kernel is dtype-agnostic; every row of d
// elements must be a multiple of 16 bytes (checked by the caller).

extern "C" __global__ void __launch_bounds__(256) pack_qkv_gradients(
    const uint4* dq, const uint4* dk, const uint4* dv, uint4* out,
    long long s, long long b, long long groups, long long per_group, long long row_vectors, long long total) {
  long long idx = blockIdx.x * (long long) blockDim.x + threadIdx.x;
  if (idx >= total) {
    return;
  }
  // out index = (((si * b + bi) * groups + gi) * (per_group + 2) + slot) * row_vectors + col
  long long col = idx % row_vectors;
  long long row = idx / row_vectors;
  long long slots = per_group + 2;
  long long slot = row % slots;
  long long rest = row / slots;
  long long gi = rest % groups;
  rest /= groups;
  long long bi = rest % b;
  long long si = rest / b;
  long long token = si * b + bi;
  const uint4* src;
  if (slot < per_group) {
    src = dq + (token * groups * per_group + gi * per_group + slot) * row_vectors;
  } else {
    src = (slot == per_group ? dk : dv) + (token * groups + gi) * row_vectors;
  }
  out[idx] = src[col];
}
