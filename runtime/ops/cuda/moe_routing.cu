// The MoE routing entries of the CUDA op table: kernels/moe_routing.cuh on the device. Expert
// ids, slots, row indices and the balance term may be host arrays (uploaded); the experts chosen
// and the per-sequence sums may be host memory (fetched after the op's one wait).
#include "ops/cuda/kernels.hpp"
#include "ops/cuda/kernels/moe_routing.cuh"
#include "ops/cuda/launch.cuh"

namespace loom::cuda {

namespace mr = moe_routing;

void router_topk(float* probs, float* lse, float* weights, int32_t* experts, double* seq,
                 const float* logits, int64_t N, int64_t E, int64_t K, int64_t T) {
  if (N <= 0) return;
  const int64_t B = T > 0 ? N / T : 0;
  run_op([&](DeviceGo& go) {
    mr::router_topk(go, probs, lse, weights, go.out(experts, N * K), go.out(seq, B * (E + 1)),
                    logits, N, E, K, T);
  });
}
void router_topk_bwd(float* dlogits, const float* probs, const float* lse, const float* weights,
                     const float* dw, const int32_t* experts, const double* balance, double z_scale,
                     int64_t N, int64_t E, int64_t K, int64_t T) {
  if (N <= 0) return;
  const int64_t B = T > 0 ? N / T : 0;
  run_op([&](DeviceGo& go) {
    mr::router_topk_bwd(go, dlogits, probs, lse, weights, dw, go.in(experts, N * K),
                        go.in(balance, B * E), z_scale, N, E, K, T);
  });
}
void gather_rows(float* dst, const float* src, const int32_t* index, int64_t rows, int64_t C) {
  if (rows <= 0) return;
  run_op([&](DeviceGo& go) { mr::gather_rows(go, dst, src, go.in(index, rows), rows, C); });
}
void combine_rows(float* y, const float* rows, const float* w, const int32_t* slot, int64_t N,
                  int64_t K, int64_t C) {
  if (N <= 0) return;
  run_op([&](DeviceGo& go) { mr::combine_rows(go, y, rows, w, go.in(slot, N * K), N, K, C); });
}
void combine_rows_bwd(float* drows, float* dw, const float* dy, const float* rows, const float* w,
                      const int32_t* slot, int64_t N, int64_t K, int64_t C) {
  if (N <= 0) return;
  run_op([&](DeviceGo& go) {
    mr::combine_rows_bwd(go, drows, dw, dy, rows, w, go.in(slot, N * K), N, K, C);
  });
}

}  // namespace loom::cuda
