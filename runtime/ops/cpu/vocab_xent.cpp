// Cross-entropy over a slice of the classes, in the three steps a vocab-parallel loss takes
// around its all-reduces (loom/ops.h: row_max, xent_stats, xent_grad). Per row i over the real
// columns j < cols:
//   m_i = max_j z_ij,  s_i = sum_j exp(z_ij - m_i),  zt_i = z_i,target (0 off this slice),
//   loss_i = log s_i + m_i - zt_i,  grad z_ij = dloss (exp(z_ij - m_i) / s_i - [j = target]),
// with m, s and zt summed over the ranks between the steps. Row after row, column after column:
// the order tp's host loop summed in, so the loss is the same to the bit.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "ops/cpu/kernels.hpp"

namespace loom::cpu {

void row_max(float* mx, const float* z, int64_t N, int64_t ld, int64_t cols) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < cols; ++j) m = std::max(m, z[i * ld + j]);
    mx[i] = m;
  }
}

void xent_stats(float* stats, const float* z, const int32_t* targets, const float* mx, int64_t N,
                int64_t ld, int64_t cols, int64_t first) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    float s = 0.f;
    for (int64_t j = 0; j < cols; ++j) s += std::exp(z[i * ld + j] - mx[i]);
    stats[i] = s;
    const int64_t t = targets[i] - first;
    stats[N + i] = targets[i] >= 0 && t >= 0 && t < ld ? z[i * ld + t] : 0.f;
  }
}

void xent_grad(float* z, float* losses, const int32_t* targets, const float* mx, const float* stats,
               int64_t N, int64_t ld, int64_t cols, int64_t first, float dloss) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    float* row = z + i * ld;
    if (targets[i] < 0) {
      losses[i] = 0.f;
      if (dloss != 0.f) std::memset(row, 0, static_cast<size_t>(ld) * sizeof(float));
      continue;
    }
    losses[i] = std::log(stats[i]) + mx[i] - stats[N + i];
    if (dloss == 0.f) continue;
    for (int64_t j = 0; j < cols; ++j) row[j] = dloss * std::exp(row[j] - mx[i]) / stats[i];
    for (int64_t j = cols; j < ld; ++j) row[j] = 0.f;
    const int64_t t = targets[i] - first;
    if (t >= 0 && t < ld) row[t] -= dloss;
  }
}

}  // namespace loom::cpu
