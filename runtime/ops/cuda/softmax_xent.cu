// Fused softmax + cross-entropy over rows of V logits: one block per row.
#include <cfloat>

#include "ops/cuda/common.cuh"
#include "ops/cuda/kernels.hpp"
#include "ops/cuda/memory.hpp"

namespace loom::cuda {

namespace {

// Block-wide reduction through shared memory; every thread gets the result.
template <class Op>
__device__ float block_reduce(float v, Op op, float* shared) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  for (int o = kWarp / 2; o > 0; o /= 2) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = shared[0];
  for (int w = 1; w < kBlock / kWarp; ++w) v = op(v, shared[w]);
  __syncthreads();
  return v;
}

// lse = log sum_j exp(z_j) over the V_real real classes; loss = lse - z[target];
// with dloss != 0: z_j = dloss (softmax_j - onehot_j), padded classes 0; target < 0: ignored.
__global__ void softmax_xent_k(float* logits, float* losses, const int32_t* targets, int64_t V, int64_t V_real,
                               float dloss) {
  __shared__ float shared[kBlock / kWarp];
  const int64_t row = blockIdx.x;
  float* z = logits + row * V;
  const int32_t t = targets[row];
  if (t < 0) {
    if (threadIdx.x == 0) losses[row] = 0.f;
    if (dloss != 0.f)
      for (int64_t j = threadIdx.x; j < V; j += blockDim.x) z[j] = 0.f;
    return;
  }
  float m = -FLT_MAX;
  for (int64_t j = threadIdx.x; j < V_real; j += blockDim.x) m = fmaxf(m, z[j]);
  m = block_reduce(m, [](float a, float b) { return fmaxf(a, b); }, shared);
  float s = 0.f;
  for (int64_t j = threadIdx.x; j < V_real; j += blockDim.x) s += expf(z[j] - m);
  s = block_reduce(s, [](float a, float b) { return a + b; }, shared);
  const float lse = m + logf(s);
  if (threadIdx.x == 0) losses[row] = lse - z[t];
  if (dloss == 0.f) return;
  __syncthreads();  // z[t] is read above before any thread overwrites it
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) z[j] = j < V_real ? dloss * expf(z[j] - lse) : 0.f;
  __syncthreads();
  if (threadIdx.x == 0) z[t] -= dloss;
}

}  // namespace

void softmax_xent(float* logits, float* losses, const int32_t* targets, int64_t N, int64_t V, int64_t V_real,
                  float dloss) {
  if (N == 0) return;
  // Targets and per-row losses are host arrays in the runtime: staged in and out.
  Staged t(const_cast<int32_t*>(targets), N * sizeof(int32_t), true, false), l(losses, N * sizeof(float), false, true);
  softmax_xent_k<<<static_cast<unsigned>(N), kBlock, 0, stream()>>>(logits, l.as<float>(), t.as<const int32_t>(), V,
                                                                    V_real, dloss);
  LOOM_CUDA_LAUNCHED();
  finish_op();
}

}  // namespace loom::cuda
