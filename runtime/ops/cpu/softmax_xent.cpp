#include <cmath>
#include <limits>

#include "ops/cpu/kernels.hpp"
#include "ops/cpu/vec_math.hpp"

namespace loom::cpu {

// Per row i: lse = log sum_j exp(z_j) over the V_real real classes, loss_i = lse - z_target.
// With dloss != 0 the row is overwritten by its gradient dloss * (softmax(z) - onehot(target));
// padded classes (j >= V_real) get 0. Rows with target < 0 are ignored.
void softmax_xent(float* logits, float* losses, const int32_t* targets, int64_t N, int64_t V,
                  int64_t V_real, float dloss) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    float* z = logits + i * V;
    int32_t t = targets[i];
    if (t < 0) {
      losses[i] = 0.f;
      if (dloss != 0.f)
        for (int64_t j = 0; j < V; ++j) z[j] = 0.f;
      continue;
    }
    float zmax = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < V_real; ++j) zmax = std::max(zmax, z[j]);
    float sum = 0.f;
    for (int64_t j = 0; j < V_real; ++j) sum += exp_fast(z[j] - zmax);
    float lse = zmax + std::log(sum);
    losses[i] = lse - z[t];
    if (dloss == 0.f) continue;
    for (int64_t j = 0; j < V_real; ++j) z[j] = dloss * exp_fast(z[j] - lse);
    for (int64_t j = V_real; j < V; ++j) z[j] = 0.f;
    z[t] -= dloss;
  }
}

}  // namespace loom::cpu
