// The MoE routing entries of the strict device's op table. The router's probabilities, weights
// and log-sum-exps stay in device memory; the experts chosen and the per-sequence sums may be
// written to host memory (the host waits, as for softmax_xent's losses); expert ids, slots,
// row indices and the balance term may be read from host memory (staged at issue). A row index
// or slot names a row the kernel reads or writes: from a host array the rows [0, max + 1) are
// declared, from a device array the rest of the rows' block.
#include "ops/strict/routing.hpp"

#include <algorithm>

#include "ops/cpu/kernels.hpp"
#include "ops/strict/launch.hpp"

namespace loom::strict {

namespace {

// The bytes of the rows of C floats at `base` that an index array names: [0, max + 1) when the
// array is host memory (`staged`, its copy), else to the end of base's block (a device array's
// values are not the host's to read before the kernel runs).
size_t rows_named(const int32_t* index, const int32_t* staged, int64_t n, const float* base,
                  int64_t C) {
  if (!base) return 0;
  if (index && is_device(index)) return to_block_end(base);
  int32_t top = -1;
  for (int64_t i = 0; i < n; ++i) top = std::max(top, staged[i]);
  return floats((static_cast<int64_t>(top) + 1) * C);
}

}  // namespace

void router_topk(float* probs, float* lse, float* weights, int32_t* experts, double* seq,
                 const float* logits, int64_t N, int64_t E, int64_t K, int64_t T) {
  Launch L("router_topk");
  const int64_t B = T > 0 ? N / T : 0;
  float* p = W(probs, floats(N * E));
  float* l = W(lse, floats(N));
  float* w = W(weights, floats(N * K));
  int32_t* ex = L.staged(
      experts, static_cast<size_t>(std::max<int64_t>(N * K, 0)) * sizeof(int32_t), true, "experts");
  double* sq = L.staged(
      seq, static_cast<size_t>(std::max<int64_t>(B * (E + 1), 0)) * sizeof(double), true, "seq");
  const float* z = R(logits, floats(N * E));
  L.run([=] { cpu::router_topk(p, l, w, ex, sq, z, N, E, K, T); });
}

void router_topk_bwd(float* dlogits, const float* probs, const float* lse, const float* weights,
                     const float* dw, const int32_t* experts, const double* balance, double z_scale,
                     int64_t N, int64_t E, int64_t K, int64_t T) {
  Launch L("router_topk_bwd");
  const int64_t B = T > 0 ? N / T : 0;
  float* dz = W(dlogits, floats(N * E));
  const float* p = R(probs, floats(N * E));
  const float* l = R(lse, floats(N));
  const float* w = R(weights, floats(N * K));
  const float* d = R(dw, floats(N * K));
  const int32_t* ex =
      L.staged(experts, static_cast<size_t>(std::max<int64_t>(N * K, 0)) * sizeof(int32_t), false,
               "experts");
  const double* bal = L.staged(
      balance, static_cast<size_t>(std::max<int64_t>(B * E, 0)) * sizeof(double), false, "balance");
  L.run([=] { cpu::router_topk_bwd(dz, p, l, w, d, ex, bal, z_scale, N, E, K, T); });
}

void gather_rows(float* dst, const float* src, const int32_t* index, int64_t rows, int64_t C) {
  Launch L("gather_rows");
  const int32_t* ix = L.staged(
      index, static_cast<size_t>(std::max<int64_t>(rows, 0)) * sizeof(int32_t), false, "index");
  float* d = W(dst, floats(rows * C));
  const float* s = R(src, rows_named(index, ix, rows, src, C));
  L.run([=] { cpu::gather_rows(d, s, ix, rows, C); });
}

void combine_rows(float* y, const float* rows, const float* w, const int32_t* slot, int64_t N,
                  int64_t K, int64_t C) {
  Launch L("combine_rows");
  const int32_t* sl = L.staged(
      slot, static_cast<size_t>(std::max<int64_t>(N * K, 0)) * sizeof(int32_t), false, "slot");
  float* out = W(y, floats(N * C));
  const float* r = R(rows, rows_named(slot, sl, N * K, rows, C));
  const float* wt = R(w, floats(N * K));
  L.run([=] { cpu::combine_rows(out, r, wt, sl, N, K, C); });
}

void combine_rows_bwd(float* drows, float* dw, const float* dy, const float* rows, const float* w,
                      const int32_t* slot, int64_t N, int64_t K, int64_t C) {
  Launch L("combine_rows_bwd");
  const int32_t* sl = L.staged(
      slot, static_cast<size_t>(std::max<int64_t>(N * K, 0)) * sizeof(int32_t), false, "slot");
  float* dr = W(drows, rows_named(slot, sl, N * K, drows, C));
  float* d = W(dw, floats(N * K));
  const float* g = R(dy, floats(N * C));
  const float* r = R(rows, rows_named(slot, sl, N * K, rows, C));
  const float* wt = R(w, floats(N * K));
  L.run([=] { cpu::combine_rows_bwd(dr, d, g, r, wt, sl, N, K, C); });
}

#undef R
#undef W

}  // namespace loom::strict
