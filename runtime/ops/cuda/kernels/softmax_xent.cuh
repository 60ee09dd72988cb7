// Fused softmax + cross-entropy over rows of V logits, one block per row, reading the logits
// once for the statistics and writing the gradient once:
//   per thread, a running (m, s) over its share of the row, s = sum exp(z - m), merged as
//   (m, s) + (m', s') = (M, s exp(m - M) + s' exp(m' - M)), M = max(m, m');
//   lse = m + log s over the V_real real classes; loss = lse - z[target];
//   with dloss != 0: z_j = dloss (exp(z_j - lse) - [j = target]), padded classes 0.
// A row whose target is < 0 is ignored: loss 0 and, with dloss != 0, a zero gradient.
#pragma once

#include <cfloat>
#include <cstdint>

#include "ops/cuda/device.cuh"

namespace loom::cuda::xent {

// (m, s) merged over the block; every thread gets the result. ms holds 2 kBlock / kWarp floats.
__device__ inline void block_lse(float& m, float& s, SharedPtr<float> ms) {
  for (int o = kWarp / 2; o > 0; o /= 2) {
    const float m2 = __shfl_xor_sync(kFullMask, m, o), s2 = __shfl_xor_sync(kFullMask, s, o);
    const float M = fmaxf(m, m2);
    s = s * expf(m - M) + s2 * expf(m2 - M), m = M;
  }
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, warps = kBlock / kWarp;
  if (lane == 0) ms[warp] = m, ms[warps + warp] = s;
  __syncthreads();
  m = ms[0], s = ms[warps];
  for (int w = 1; w < warps; ++w) {
    const float m2 = ms[w], s2 = ms[warps + w], M = fmaxf(m, m2);
    s = s * expf(m - M) + s2 * expf(m2 - M), m = M;
  }
}

__global__ void softmax_xent_k(float* logits, float* losses, const int32_t* targets, int64_t V,
                               int64_t V_real, float dloss) {
  LOOM_SHARED(float, ms, 2 * kBlock / kWarp);
  const int64_t row = blockIdx.x;
  float* z = logits + row * V;
  const int32_t t = targets[row];
  if (t < 0) {
    if (threadIdx.x == 0) losses[row] = 0.f;
    if (dloss != 0.f)
      for (int64_t j = threadIdx.x; j < V; j += blockDim.x) z[j] = 0.f;
    return;
  }
  const float zt = z[t];  // read before any thread writes the row
  float m = -FLT_MAX, s = 0.f;
  for (int64_t j = threadIdx.x; j < V_real; j += blockDim.x) {
    const float x = z[j];
    if (x > m)
      s = s * expf(m - x) + 1.f, m = x;
    else
      s += expf(x - m);
  }
  block_lse(m, s, ms);
  const float lse = m + logf(s);
  if (threadIdx.x == 0) losses[row] = lse - zt;
  if (dloss == 0.f) return;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x)
    z[j] = j < V_real ? dloss * (expf(z[j] - lse) - (j == t ? 1.f : 0.f)) : 0.f;
}

template <class Go>
void run(Go& go, float* logits, float* losses, const int32_t* targets, int64_t N, int64_t V,
         int64_t V_real, float dloss) {
  if (N > 0)
    go(LOOM_KERNEL(softmax_xent_k), Shape{grid_of(N), dim3(kBlock)}, logits, losses, targets, V,
       V_real, dloss);
}

}  // namespace loom::cuda::xent
