// The softmax cross-entropy entry of the CUDA op table: kernels/softmax_xent.cuh on the device.
#include "ops/cuda/kernels.hpp"
#include "ops/cuda/kernels/softmax_xent.cuh"
#include "ops/cuda/launch.cuh"
#include "ops/cuda/memory.hpp"

namespace loom::cuda {

void softmax_xent(float* logits, float* losses, const int32_t* targets, int64_t N, int64_t V,
                  int64_t V_real, float dloss) {
  if (N == 0) return;
  // Targets and per-row losses are host arrays in the runtime: staged in and out.
  Staged t(const_cast<int32_t*>(targets), N * sizeof(int32_t), true, false),
      l(losses, N * sizeof(float), false, true);
  run_op([&](DeviceGo& go) {
    xent::run(go, logits, l.as<float>(), t.as<const int32_t>(), N, V, V_real, dloss);
  });
}

}  // namespace loom::cuda
