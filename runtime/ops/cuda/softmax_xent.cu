// The cross-entropy entries of the CUDA op table: kernels/softmax_xent.cuh (the whole vocabulary)
// and kernels/vocab_xent.cuh (a slice of it, around a vocab-parallel loss's all-reduces).
#include "ops/cuda/kernels.hpp"
#include "ops/cuda/kernels/softmax_xent.cuh"
#include "ops/cuda/kernels/vocab_xent.cuh"
#include "ops/cuda/launch.cuh"

namespace loom::cuda {

// Targets and per-row losses may be host arrays (the contract's): uploaded, and copied back.
void softmax_xent(float* logits, float* losses, const int32_t* targets, int64_t N, int64_t V,
                  int64_t V_real, float dloss) {
  if (N == 0) return;
  run_op([&](DeviceGo& go) {
    xent::run(go, logits, go.out(losses, N), go.in(targets, N), N, V, V_real, dloss);
  });
}

void row_max(float* mx, const float* z, int64_t N, int64_t ld, int64_t cols) {
  run_op([&](DeviceGo& go) { vocab_xent::row_max(go, mx, z, N, ld, cols); });
}
void xent_stats(float* stats, const float* z, const int32_t* targets, const float* mx, int64_t N,
                int64_t ld, int64_t cols, int64_t first) {
  if (N == 0) return;
  run_op([&](DeviceGo& go) {
    vocab_xent::xent_stats(go, stats, z, go.in(targets, N), mx, N, ld, cols, first);
  });
}
void xent_grad(float* z, float* losses, const int32_t* targets, const float* mx, const float* stats,
               int64_t N, int64_t ld, int64_t cols, int64_t first, float dloss) {
  if (N == 0) return;
  run_op([&](DeviceGo& go) {
    vocab_xent::xent_grad(go, z, go.out(losses, N), go.in(targets, N), mx, stats, N, ld, cols,
                          first, dloss);
  });
}

}  // namespace loom::cuda
