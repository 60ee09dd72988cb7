// The strict device's MoE routing entries (loom/ops.h says what each writes): the CPU
// kernels behind the strict device's checks, as the rest of its table.
#pragma once

#include <cstdint>

namespace loom::strict {

void router_topk(float* probs, float* lse, float* weights, int32_t* experts, double* seq,
                 const float* logits, int64_t N, int64_t E, int64_t K, int64_t T);
void router_topk_bwd(float* dlogits, const float* probs, const float* lse, const float* weights,
                     const float* dw, const int32_t* experts, const double* balance, double z_scale,
                     int64_t N, int64_t E, int64_t K, int64_t T);
void gather_rows(float* dst, const float* src, const int32_t* index, int64_t rows, int64_t C);
void combine_rows(float* y, const float* rows, const float* w, const int32_t* slot, int64_t N,
                  int64_t K, int64_t C);
void combine_rows_bwd(float* drows, float* dw, const float* dy, const float* rows, const float* w,
                      const int32_t* slot, int64_t N, int64_t K, int64_t C);

}  // namespace loom::strict
