// The norm entries of the CUDA op table: kernels/norms.cuh's launch sequences on the device.
#include "ops/cuda/kernels.hpp"
#include "ops/cuda/kernels/norms.cuh"
#include "ops/cuda/launch.cuh"

namespace loom::cuda {

void layernorm_fwd_eps(float* out, float* mean, float* rstd, const float* inp, const float* w,
                       const float* b, int64_t N, int64_t C, float eps) {
  run_op([&](DeviceGo& go) { norms::layernorm_fwd(go, out, mean, rstd, inp, w, b, N, C, eps); });
}

void layernorm_fwd(float* out, float* mean, float* rstd, const float* inp, const float* w,
                   const float* b, int64_t N, int64_t C) {
  layernorm_fwd_eps(out, mean, rstd, inp, w, b, N, C, norms::kEps);
}

void layernorm_bwd(float* dinp, float* dw, float* db, const float* dout, const float* inp,
                   const float* w, const float* mean, const float* rstd, int64_t N, int64_t C) {
  run_op([&](DeviceGo& go) {
    norms::layernorm_bwd(go, dinp, dw, db, dout, inp, w, mean, rstd, N, C);
  });
}

void rmsnorm_fwd_eps(float* out, float* rstd, const float* inp, const float* w, int64_t N,
                     int64_t C, float eps) {
  run_op([&](DeviceGo& go) { norms::rmsnorm_fwd(go, out, rstd, inp, w, N, C, eps); });
}

void rmsnorm_fwd(float* out, float* rstd, const float* inp, const float* w, int64_t N, int64_t C) {
  rmsnorm_fwd_eps(out, rstd, inp, w, N, C, norms::kEps);
}

void rmsnorm_bwd(float* dinp, float* dw, const float* dout, const float* inp, const float* w,
                 const float* rstd, int64_t N, int64_t C) {
  run_op([&](DeviceGo& go) { norms::rmsnorm_bwd(go, dinp, dw, dout, inp, w, rstd, N, C); });
}

}  // namespace loom::cuda
