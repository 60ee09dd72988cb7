// The softmax cross-entropy entry of the CUDA op table: kernels/softmax_xent.cuh on the device.
#include "ops/cuda/kernels.hpp"
#include "ops/cuda/kernels/softmax_xent.cuh"
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

}  // namespace loom::cuda
