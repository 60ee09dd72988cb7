// A mixture-of-experts layer's routing and row moves (loom/ops.h says what each
// writes). Per token t of N, with E experts and K choices, in sequences of T rows:
//   router_topk:      p = softmax(z) and lse = log sum exp(z) in double; the K largest p (ties
//                     to the lower expert), weights renormalised over them (K = 1: the raw p);
//                     per sequence, sum_t p_t and sum_t lse_t^2 in double, row order.
//   router_topk_bwd:  dp = balance + d(weights)/dp; dz = p (dp - <p, dp>) + z_scale lse p.
//   gather_rows:      dst_r = src_index[r]
//   combine_rows:     y_t = sum_k w_tk rows_slot[tk]         (k in order, kept slots only)
//   combine_rows_bwd: drows_slot[tk] = w_tk dy_t,  dw_tk = <dy_t, rows_slot[tk]>
// Each row's arithmetic runs in one fixed order, so the CPU, the strict device and every
// layout route the same tokens to the same experts.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "ops/cpu/kernels.hpp"

namespace loom::cpu {

namespace {

// Token t's softmax over its E logits, its log-sum-exp, and its top K with their weights.
void route_row(float* p, float* lse, float* w, int32_t* ex, const float* z, int64_t E, int64_t K) {
  const float m = *std::max_element(z, z + E);
  double s = 0;
  for (int64_t e = 0; e < E; ++e) s += std::exp(static_cast<double>(z[e] - m));
  *lse = m + static_cast<float>(std::log(s));
  for (int64_t e = 0; e < E; ++e)
    p[e] = static_cast<float>(std::exp(static_cast<double>(z[e] - m)) / s);
  for (int64_t k = 0; k < K; ++k) {  // the largest not yet taken, the lower expert on ties
    int32_t best = -1;
    for (int32_t e = 0; e < E; ++e) {
      if (std::find(ex, ex + k, e) != ex + k) continue;
      if (best < 0 || p[e] > p[best]) best = e;
    }
    ex[k] = best;
  }
  double sum = 0;
  for (int64_t k = 0; k < K; ++k) sum += p[ex[k]];
  for (int64_t k = 0; k < K; ++k) w[k] = K > 1 ? static_cast<float>(p[ex[k]] / sum) : p[ex[k]];
}

// dp_e of a token: its sequence's balance term, plus its choice's weight gradient when e is one
// of its experts (renormalised for K > 1). Recomputed per e rather than stored: no per-token array.
double router_dp(int64_t e, const double* bal, const int32_t* ex, const float* dwt, double dot,
                 double S, int64_t K) {
  double dp = bal[e];
  for (int64_t k = 0; k < K; ++k)
    if (ex[k] == e) dp += K > 1 ? (dwt[k] - dot) / S : static_cast<double>(dwt[k]);
  return dp;
}

}  // namespace

void router_topk(float* probs, float* lse, float* weights, int32_t* experts, double* seq,
                 const float* logits, int64_t N, int64_t E, int64_t K, int64_t T) {
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < N; ++t)
    route_row(probs + t * E, lse + t, weights + t * K, experts + t * K, logits + t * E, E, K);
  const int64_t B = T > 0 ? N / T : 0;
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < B; ++b) {
    double* out = seq + b * (E + 1);
    std::fill(out, out + E + 1, 0.0);
    for (int64_t t = b * T; t < (b + 1) * T; ++t) {
      for (int64_t e = 0; e < E; ++e) out[e] += probs[t * E + e];
      out[E] += static_cast<double>(lse[t]) * lse[t];
    }
  }
}

void router_topk_bwd(float* dlogits, const float* probs, const float* lse, const float* weights,
                     const float* dw, const int32_t* experts, const double* balance, double z_scale,
                     int64_t N, int64_t E, int64_t K, int64_t T) {
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < N; ++t) {
    const float* p = probs + t * E;
    const int32_t* ex = experts + t * K;
    const float *dwt = dw + t * K, *wt = weights + t * K;
    const double* bal = balance + (t / T) * E;
    double S = 0, dot = 0;
    for (int64_t k = 0; k < K; ++k) S += p[ex[k]], dot += static_cast<double>(dwt[k]) * wt[k];
    double mean = 0;
    for (int64_t e = 0; e < E; ++e) mean += p[e] * router_dp(e, bal, ex, dwt, dot, S, K);
    const double zgrad = z_scale * lse[t];
    for (int64_t e = 0; e < E; ++e)
      dlogits[t * E + e] =
          static_cast<float>(p[e] * (router_dp(e, bal, ex, dwt, dot, S, K) - mean) + zgrad * p[e]);
  }
}

void gather_rows(float* dst, const float* src, const int32_t* index, int64_t rows, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(dst + r * C, src + static_cast<int64_t>(index[r]) * C,
                static_cast<size_t>(C) * sizeof(float));
}

void combine_rows(float* y, const float* rows, const float* w, const int32_t* slot, int64_t N,
                  int64_t K, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < N; ++t) {
    float* yt = y + t * C;
    std::fill(yt, yt + C, 0.f);
    for (int64_t k = 0; k < K; ++k) {
      const int64_t i = t * K + k;
      if (slot[i] < 0) continue;
      const float* src = rows + static_cast<int64_t>(slot[i]) * C;
      const float wi = w ? w[i] : 1.f;
      for (int64_t j = 0; j < C; ++j) yt[j] += wi * src[j];
    }
  }
}

void combine_rows_bwd(float* drows, float* dw, const float* dy, const float* rows, const float* w,
                      const int32_t* slot, int64_t N, int64_t K, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N * K; ++i) {
    if (slot[i] < 0) {
      dw[i] = 0.f;
      continue;
    }
    const float* dyt = dy + (i / K) * C;
    const float* src = rows + static_cast<int64_t>(slot[i]) * C;
    float* d = drows + static_cast<int64_t>(slot[i]) * C;
    double s = 0;
    for (int64_t j = 0; j < C; ++j) d[j] = w[i] * dyt[j], s += static_cast<double>(dyt[j]) * src[j];
    dw[i] = static_cast<float>(s);
  }
}

}  // namespace loom::cpu
