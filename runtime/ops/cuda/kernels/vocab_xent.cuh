// Cross-entropy over a slice of the classes, in the three steps a vocab-parallel loss takes
// around its all-reduces (runtime/ops/cpu/vocab_xent.cpp is the twin). One warp per row; per row
// i over the real columns j < cols:
//   row_max:    m_i = max_j z_ij
//   xent_stats: s_i = sum_j exp(z_ij - m_i) (a warp sum, in another order than the CPU's),
//               zt_i = z_i,target on this slice, else 0
//   xent_grad:  loss_i = log s_i + m_i - zt_i; grad z_ij = dloss (exp(z_ij - m_i) / s_i - [j = t]),
//               0 past the real columns and on an ignored row (target < 0)
// with m, s and zt summed over the ranks between the steps by the caller. expf, logf and the sum's
// order are the GPU's, so the statistics, losses and gradient equal the CPU's to rounding.
#pragma once

#include <cstdint>

#include "ops/cuda/device.cuh"

namespace loom::cuda::vocab_xent {

constexpr int kRowsPerBlock = kBlock / kWarp;

__global__ void row_max_k(float* mx, const float* z, int64_t N, int64_t ld, int64_t cols) {
  const int64_t i = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (i >= N) return;  // the whole warp: i is the warp's row
  float m = -INFINITY;
  for (int64_t j = lane; j < cols; j += kWarp) m = fmaxf(m, z[i * ld + j]);
  m = warp_max(m);
  if (lane == 0) mx[i] = m;
}

__global__ void xent_stats_k(float* stats, const float* z, const int32_t* targets, const float* mx,
                             int64_t N, int64_t ld, int64_t cols, int64_t first) {
  const int64_t i = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (i >= N) return;
  float s = 0.f;
  for (int64_t j = lane; j < cols; j += kWarp) s += expf(z[i * ld + j] - mx[i]);
  s = warp_sum(s);
  if (lane != 0) return;
  const int64_t t = targets[i] - first;
  stats[i] = s;
  stats[N + i] = targets[i] >= 0 && t >= 0 && t < ld ? z[i * ld + t] : 0.f;
}

__global__ void xent_grad_k(float* z, float* losses, const int32_t* targets, const float* mx,
                            const float* stats, int64_t N, int64_t ld, int64_t cols, int64_t first,
                            float dloss) {
  const int64_t i = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (i >= N) return;
  const bool ignored = targets[i] < 0;
  if (lane == 0) losses[i] = ignored ? 0.f : logf(stats[i]) + mx[i] - stats[N + i];
  if (dloss == 0.f) return;
  float* row = z + i * ld;
  const int64_t t = targets[i] - first;
  for (int64_t j = lane; j < ld; j += kWarp) {
    float g = !ignored && j < cols ? dloss * expf(row[j] - mx[i]) / stats[i] : 0.f;
    if (!ignored && j == t) g -= dloss;
    row[j] = g;
  }
}

// ---- launch sequences ----

inline Shape rows_shape(int64_t N) {
  return Shape{grid_of(blocks_for(N, kRowsPerBlock)), dim3(kBlock)};
}

template <class Go>
void row_max(Go& go, float* mx, const float* z, int64_t N, int64_t ld, int64_t cols) {
  if (N > 0) go(LOOM_KERNEL(row_max_k), rows_shape(N), mx, z, N, ld, cols);
}
template <class Go>
void xent_stats(Go& go, float* stats, const float* z, const int32_t* targets, const float* mx,
                int64_t N, int64_t ld, int64_t cols, int64_t first) {
  if (N > 0)
    go(LOOM_KERNEL(xent_stats_k), rows_shape(N), stats, z, targets, mx, N, ld, cols, first);
}
template <class Go>
void xent_grad(Go& go, float* z, float* losses, const int32_t* targets, const float* mx,
               const float* stats, int64_t N, int64_t ld, int64_t cols, int64_t first,
               float dloss) {
  if (N > 0)
    go(LOOM_KERNEL(xent_grad_k), rows_shape(N), z, losses, targets, mx, stats, N, ld, cols, first,
       dloss);
}

}  // namespace loom::cuda::vocab_xent
