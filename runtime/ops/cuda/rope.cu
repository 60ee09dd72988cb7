// The RoPE entries of the CUDA op table: kernels/rope.cuh on the device. The cos and sin tables
// may be host arrays (the contract's): the rows up to pos0 + T are uploaded when they are.
#include "ops/cuda/kernels.hpp"
#include "ops/cuda/kernels/rope.cuh"
#include "ops/cuda/launch.cuh"

namespace loom::cuda {

void rope_fwd(float* x, int64_t ld, int64_t B, int64_t T, int64_t heads, int64_t D,
              const float* cos, const float* sin, int64_t pos0) {
  const int64_t table = (pos0 + T) * (D / 2);  // the rows the kernel reads, when host tables
  run_op([&](DeviceGo& go) {
    rope::run(go, x, ld, B, T, heads, D, go.in(cos, table), go.in(sin, table), pos0, 1.f);
  });
}

void rope_bwd(float* dx, int64_t ld, int64_t B, int64_t T, int64_t heads, int64_t D,
              const float* cos, const float* sin, int64_t pos0) {
  const int64_t table = (pos0 + T) * (D / 2);
  run_op([&](DeviceGo& go) {
    rope::run(go, dx, ld, B, T, heads, D, go.in(cos, table), go.in(sin, table), pos0, -1.f);
  });
}

}  // namespace loom::cuda
