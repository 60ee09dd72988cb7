// Sums per-row contributions into per-column accumulators (parameter gradients of norms and
// biases). Rows are cut into fixed blocks, each block summed on its own and the block sums added
// in block order, so the result is bit-identical for every thread count — a resumed or
// re-threaded run reproduces the same gradients.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

namespace loom::cpu {

constexpr int64_t kRowBlock = 64;

// For K accumulators: out[k][c] += sum over rows i of contrib(i, c)[k].
template <int K, class Contrib>
void column_reduce(int64_t N, int64_t C, std::array<float*, K> out, Contrib&& contrib) {
  int64_t blocks = (N + kRowBlock - 1) / kRowBlock;
  std::vector<float> partial(static_cast<size_t>(blocks * K * C), 0.f);
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    float* p = partial.data() + blk * K * C;
    int64_t end = std::min(N, (blk + 1) * kRowBlock);
    for (int64_t i = blk * kRowBlock; i < end; ++i) {
      for (int64_t c = 0; c < C; ++c) {
        std::array<float, K> v = contrib(i, c);
        for (int k = 0; k < K; ++k) p[k * C + c] += v[k];
      }
    }
  }
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < C; ++c) {
    for (int k = 0; k < K; ++k) {
      if (!out[k]) continue;
      float s = 0.f;
      for (int64_t blk = 0; blk < blocks; ++blk) s += partial[(blk * K + k) * C + c];
      out[k][c] += s;
    }
  }
}

}  // namespace loom::cpu
