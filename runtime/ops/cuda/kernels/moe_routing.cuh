// A mixture-of-experts layer's routing and row moves (runtime/ops/cpu/moe_routing.cpp
// is the twin). Per token t of N, E experts, K choices, sequences of T rows (b = t / T):
//   router_topk:  m = max_e z_te, s = sum_e exp(z_te - m), p_te = exp(z_te - m) / s and
//                 lse_t = m + log s in double; experts_tk = the k-th largest p (ties to the
//                 lower expert); w_tk = p_tk / sum_j p_tj (K > 1), p_t0 (K = 1);
//                 seq_be = sum_{t in b} p_te, seq_bE = sum_{t in b} lse_t^2 in double, row order.
//   router_topk_bwd: dp_e = balance_be + (dw_tk - sum_j dw_tj w_tj) / sum_j p_t,experts_tj at
//                 e = experts_tk (K > 1; dw_t0 for K = 1), dz_te = p_te (dp_e - sum_e' p_te' dp_e')
//                 + z_scale lse_t p_te.
//   gather_rows:  dst_r = src_index[r]
//   combine_rows: y_t = sum_k w_tk rows_slot[tk] over kept slots, k in order
//   combine_rows_bwd: drows_slot[tk] = w_tk dy_t;  dw_tk = sum_j dy_tj rows_slot[tk],j in double
// One thread per token for the routing (E and K are small: a row's loops are the CPU's, in its
// order, so only exp and log's last bit and nvcc's fused multiply-adds can differ), per sequence
// and statistic for the sums (T rows each, in order: a long sequence's sums are a serial loop),
// per element for the row moves, per assignment for dw. No atomics: every output has one writer.
#pragma once

#include <cstdint>

#include "ops/cuda/device.cuh"

namespace loom::cuda::moe_routing {

__global__ void router_rows_k(float* probs, float* lse, float* weights, int32_t* experts,
                              const float* logits, int64_t N, int64_t E, int64_t K) {
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t >= N) return;
  const float* z = logits + t * E;
  float* p = probs + t * E;
  int32_t* ex = experts + t * K;
  float m = z[0];
  for (int64_t e = 1; e < E; ++e) m = z[e] > m ? z[e] : m;
  double s = 0;
  for (int64_t e = 0; e < E; ++e) s += exp(static_cast<double>(z[e] - m));
  lse[t] = m + static_cast<float>(log(s));
  for (int64_t e = 0; e < E; ++e) p[e] = static_cast<float>(exp(static_cast<double>(z[e] - m)) / s);
  for (int64_t k = 0; k < K; ++k) {  // the largest not yet taken, the lower expert on ties
    int32_t best = -1;
    for (int32_t e = 0; e < E; ++e) {
      bool taken = false;
      for (int64_t j = 0; j < k; ++j) taken = taken || ex[j] == e;
      if (!taken && (best < 0 || p[e] > p[best])) best = e;
    }
    ex[k] = best;
  }
  double sum = 0;
  for (int64_t k = 0; k < K; ++k) sum += p[ex[k]];
  for (int64_t k = 0; k < K; ++k)
    weights[t * K + k] = K > 1 ? static_cast<float>(p[ex[k]] / sum) : p[ex[k]];
}

// Thread (b, e) for e <= E: sequence b's probability sum of expert e, or (e = E) its sum of lse^2.
__global__ void router_seq_k(double* seq, const float* probs, const float* lse, int64_t B,
                             int64_t E, int64_t T) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= B * (E + 1)) return;
  const int64_t b = i / (E + 1), e = i % (E + 1);
  double s = 0;
  for (int64_t t = b * T; t < (b + 1) * T; ++t)
    s += e < E ? static_cast<double>(probs[t * E + e]) : static_cast<double>(lse[t]) * lse[t];
  seq[i] = s;
}

// dp_e of token t: the balance term, plus its choice's weight gradient if e is among its experts.
__device__ inline double router_dp(int64_t e, const double* bal, const int32_t* ex,
                                   const float* dwt, double dot, double S, int64_t K) {
  double dp = bal[e];
  for (int64_t k = 0; k < K; ++k)
    if (ex[k] == e) dp += K > 1 ? (dwt[k] - dot) / S : static_cast<double>(dwt[k]);
  return dp;
}

__global__ void router_bwd_k(float* dlogits, const float* probs, const float* lse,
                             const float* weights, const float* dw, const int32_t* experts,
                             const double* balance, double z_scale, int64_t N, int64_t E, int64_t K,
                             int64_t T) {
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t >= N) return;
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

__global__ void gather_rows_k(float* dst, const float* src, const int32_t* index, int64_t rows,
                              int64_t C) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= rows * C) return;
  dst[i] = src[static_cast<int64_t>(index[i / C]) * C + i % C];
}

__global__ void combine_rows_k(float* y, const float* rows, const float* w, const int32_t* slot,
                               int64_t N, int64_t K, int64_t C) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= N * C) return;
  const int64_t t = i / C, j = i % C;
  float acc = 0.f;
  for (int64_t k = 0; k < K; ++k) {
    const int32_t r = slot[t * K + k];
    if (r >= 0) acc += (w ? w[t * K + k] : 1.f) * rows[static_cast<int64_t>(r) * C + j];
  }
  y[i] = acc;
}

__global__ void combine_bwd_rows_k(float* drows, const float* dy, const float* w,
                                   const int32_t* slot, int64_t N, int64_t K, int64_t C) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= N * K * C) return;
  const int64_t a = i / C, j = i % C;
  if (slot[a] >= 0) drows[static_cast<int64_t>(slot[a]) * C + j] = w[a] * dy[(a / K) * C + j];
}

__global__ void combine_bwd_weights_k(float* dw, const float* dy, const float* rows,
                                      const int32_t* slot, int64_t N, int64_t K, int64_t C) {
  const int64_t a = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (a >= N * K) return;
  if (slot[a] < 0) {
    dw[a] = 0.f;
    return;
  }
  const float *dyt = dy + (a / K) * C, *src = rows + static_cast<int64_t>(slot[a]) * C;
  double s = 0;
  for (int64_t j = 0; j < C; ++j) s += static_cast<double>(dyt[j]) * src[j];
  dw[a] = static_cast<float>(s);
}

// ---- launch sequences ----

inline Shape flat(int64_t n) { return Shape{grid_of(blocks_for(n)), dim3(kBlock)}; }

template <class Go>
void router_topk(Go& go, float* probs, float* lse, float* weights, int32_t* experts, double* seq,
                 const float* logits, int64_t N, int64_t E, int64_t K, int64_t T) {
  if (N <= 0 || E <= 0) return;
  go(LOOM_KERNEL(router_rows_k), flat(N), probs, lse, weights, experts, logits, N, E, K);
  const int64_t B = T > 0 ? N / T : 0;
  if (B > 0)
    go(LOOM_KERNEL(router_seq_k), flat(B * (E + 1)), seq, static_cast<const float*>(probs),
       static_cast<const float*>(lse), B, E, T);
}
template <class Go>
void router_topk_bwd(Go& go, float* dlogits, const float* probs, const float* lse,
                     const float* weights, const float* dw, const int32_t* experts,
                     const double* balance, double z_scale, int64_t N, int64_t E, int64_t K,
                     int64_t T) {
  if (N > 0 && E > 0)
    go(LOOM_KERNEL(router_bwd_k), flat(N), dlogits, probs, lse, weights, dw, experts, balance,
       z_scale, N, E, K, T);
}
template <class Go>
void gather_rows(Go& go, float* dst, const float* src, const int32_t* index, int64_t rows,
                 int64_t C) {
  if (rows > 0 && C > 0) go(LOOM_KERNEL(gather_rows_k), flat(rows * C), dst, src, index, rows, C);
}
template <class Go>
void combine_rows(Go& go, float* y, const float* rows, const float* w, const int32_t* slot,
                  int64_t N, int64_t K, int64_t C) {
  if (N > 0 && C > 0) go(LOOM_KERNEL(combine_rows_k), flat(N * C), y, rows, w, slot, N, K, C);
}
template <class Go>
void combine_rows_bwd(Go& go, float* drows, float* dw, const float* dy, const float* rows,
                      const float* w, const int32_t* slot, int64_t N, int64_t K, int64_t C) {
  if (N <= 0 || K <= 0) return;
  if (C > 0) go(LOOM_KERNEL(combine_bwd_rows_k), flat(N * K * C), drows, dy, w, slot, N, K, C);
  go(LOOM_KERNEL(combine_bwd_weights_k), flat(N * K), dw, dy, rows, slot, N, K, C);
}

}  // namespace loom::cuda::moe_routing
