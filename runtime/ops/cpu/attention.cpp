// Causal grouped-query attention as tiled online softmax (Dao et al., FlashAttention 1 and 2).
// Work is split over (batch, query head) pairs; within one pair, queries go in blocks of kBr rows
// and keys in blocks of kBc columns, so the largest score buffer is kBr x kBc, never T x T. A
// query head reads its group's key/value head where it lies: K and V are never repeated in memory
// (each thread copies the one head it works on, as for multi-head attention).
#include <cmath>
#include <limits>
#include <vector>

#include "ops/cpu/kernels.hpp"
#include "ops/cpu/vec_math.hpp"

namespace loom::cpu {

namespace {

constexpr int64_t kBr = 32;  // query rows per tile
constexpr int64_t kBc = 64;  // key columns per tile

// One query head of one sequence and its key/value head, copied out of the strided rows into
// contiguous buffers: q (T x D, pre-scaled by 1/sqrt(D)), k (T x D), v (T x D) and the transposes
// kt, vt (D x T) that let score tiles be built as outer products with unit-stride inner loops.
struct Layout {
  const float *q, *k, *v;
  int64_t ldq, ldkv, T, H, Hkv, D;
  int64_t group(int64_t h) const { return h / (H / Hkv); }
};

struct HeadView {
  std::vector<float> q, k, v, kt, vt;
  void load(const Layout& L, int64_t b, int64_t h, bool need_vt) {
    const int64_t T = L.T, D = L.D, g = L.group(h);
    float s = 1.f / std::sqrt(static_cast<float>(D));
    q.resize(T * D), k.resize(T * D), v.resize(T * D), kt.resize(D * T);
    if (need_vt) vt.resize(D * T);
    for (int64_t t = 0; t < T; ++t) {
      const float* qr = L.q + (b * T + t) * L.ldq + h * D;
      const float* kr = L.k + (b * T + t) * L.ldkv + g * D;
      const float* vr = L.v + (b * T + t) * L.ldkv + g * D;
      for (int64_t d = 0; d < D; ++d) {
        q[t * D + d] = qr[d] * s;
        k[t * D + d] = kr[d];
        v[t * D + d] = vr[d];
        kt[d * T + t] = kr[d];
        if (need_vt) vt[d * T + t] = vr[d];
      }
    }
  }
};

// S[r, c] = sum_d A[i0 + r, d] * Bt[d, j0 + c]   for r < rows, c < cols   (A is T x D, Bt D x T)
void score_tile(float* S, const float* A, const float* Bt, int64_t i0, int64_t rows, int64_t j0,
                int64_t cols, int64_t T, int64_t D) {
  for (int64_t r = 0; r < rows; ++r) {
    float* s = S + r * kBc;
    for (int64_t c = 0; c < cols; ++c) s[c] = 0.f;
    const float* a = A + (i0 + r) * D;
    for (int64_t d = 0; d < D; ++d) {
      const float ad = a[d];
      const float* bt = Bt + d * T + j0;
#pragma omp simd
      for (int64_t c = 0; c < cols; ++c) s[c] += ad * bt[c];
    }
  }
}

// dk[b, t, g] = sum over the heads h of group g (in order) of share_dk[b, h, t]; dv likewise.
// shares: [B, H, 2, T, D] (dk then dv per head).
void sum_group_shares(float* dk, float* dv, const float* shares, int64_t ldkv, int64_t B, int64_t T,
                      int64_t H, int64_t Hkv, int64_t D) {
  const int64_t per_group = H / Hkv;
#pragma omp parallel for schedule(static) collapse(2)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t g = 0; g < Hkv; ++g) {
      for (int64_t t = 0; t < T; ++t) {
        float* dkr = dk + (b * T + t) * ldkv + g * D;
        float* dvr = dv + (b * T + t) * ldkv + g * D;
        for (int64_t d = 0; d < D; ++d) dkr[d] = dvr[d] = 0.f;
        for (int64_t h = g * per_group; h < (g + 1) * per_group; ++h) {
          const float* s = shares + 2 * (b * H + h) * T * D + t * D;
          for (int64_t d = 0; d < D; ++d) dkr[d] += s[d], dvr[d] += s[T * D + d];
        }
      }
    }
  }
}

}  // namespace

// For each query row i (causal: keys j <= i), with s_ij = q_i . k_j / sqrt(D):
//   m_i = max_j s_ij,  l_i = sum_j exp(s_ij - m_i),  out_i = sum_j exp(s_ij - m_i) v_j / l_i
// computed in one pass over key tiles by rescaling the running (m, l, acc) whenever m grows.
// lse_i = m_i + log l_i is saved for backward.
void attention_gqa_fwd(float* out, float* lse, const float* q, const float* k, const float* v,
                       int64_t ldq, int64_t ldkv, int64_t B, int64_t T, int64_t H, int64_t Hkv,
                       int64_t D) {
  const int64_t C = H * D;
  const Layout L{q, k, v, ldq, ldkv, T, H, Hkv, D};
#pragma omp parallel
  {
    HeadView hv;
    std::vector<float> S(kBr * kBc), acc(kBr * D), m(kBr), l(kBr);
#pragma omp for schedule(static) collapse(2)
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t h = 0; h < H; ++h) {
        hv.load(L, b, h, false);
        for (int64_t i0 = 0; i0 < T; i0 += kBr) {
          int64_t rows = std::min(kBr, T - i0);
          std::fill(m.begin(), m.end(), -std::numeric_limits<float>::infinity());
          std::fill(l.begin(), l.end(), 0.f);
          std::fill(acc.begin(), acc.end(), 0.f);
          for (int64_t j0 = 0; j0 < i0 + rows; j0 += kBc) {
            int64_t cols = std::min(kBc, i0 + rows - j0);
            score_tile(S.data(), hv.q.data(), hv.kt.data(), i0, rows, j0, cols, T, D);
            for (int64_t r = 0; r < rows; ++r) {
              float* s = S.data() + r * kBc;
              int64_t valid = std::min(cols, i0 + r - j0 + 1);  // causal limit within the tile
              if (valid <= 0) continue;
              float mx = m[r];
              for (int64_t c = 0; c < valid; ++c) mx = std::max(mx, s[c]);
              float alpha = exp_fast(m[r] - mx);
              float sum = 0.f;
              for (int64_t c = 0; c < valid; ++c) {
                s[c] = exp_fast(s[c] - mx);
                sum += s[c];
              }
              l[r] = l[r] * alpha + sum;
              m[r] = mx;
              float* a = acc.data() + r * D;
#pragma omp simd
              for (int64_t d = 0; d < D; ++d) a[d] *= alpha;
              for (int64_t c = 0; c < valid; ++c) {
                const float p = s[c];
                const float* vj = hv.v.data() + (j0 + c) * D;
#pragma omp simd
                for (int64_t d = 0; d < D; ++d) a[d] += p * vj[d];
              }
            }
          }
          for (int64_t r = 0; r < rows; ++r) {
            int64_t t = i0 + r;
            float inv = 1.f / l[r];
            float* o = out + (b * T + t) * C + h * D;
            for (int64_t d = 0; d < D; ++d) o[d] = acc[r * D + d] * inv;
            lse[(b * H + h) * T + t] = m[r] + std::log(l[r]);
          }
        }
      }
    }
  }
}

// With p_ij = exp(s_ij - lse_i) recomputed per tile and Delta_i = dout_i . out_i:
//   dv_j += sum_i p_ij dout_i
//   dp_ij = dout_i . v_j,   ds_ij = p_ij (dp_ij - Delta_i)
//   dq_i += sum_j ds_ij k_j / sqrt(D),   dk_j += sum_i ds_ij q_i / sqrt(D)
// A key/value head's dk and dv sum over the query heads of its group: each (batch, head) pair
// writes its share to a buffer of its own, and the shares are added in head order afterwards,
// so the result does not depend on the thread count. With one head per group they go straight
// to dk and dv.
void attention_gqa_bwd(float* dq_out, float* dk_out, float* dv_out, const float* dout,
                       const float* q, const float* k, const float* v, const float* out,
                       const float* lse, int64_t ldq, int64_t ldkv, int64_t B, int64_t T, int64_t H,
                       int64_t Hkv, int64_t D) {
  const int64_t C = H * D, per_group = H / Hkv;
  const Layout layout{q, k, v, ldq, ldkv, T, H, Hkv, D};
  const float scale = 1.f / std::sqrt(static_cast<float>(D));
  std::vector<float> shares(per_group > 1 ? 2 * B * H * T * D : 0);
#pragma omp parallel
  {
    HeadView hv;
    std::vector<float> S(kBr * kBc), dP(kBr * kBc);
    std::vector<float> dO, delta, dq, dk, dv;
#pragma omp for schedule(static) collapse(2)
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t h = 0; h < H; ++h) {
        hv.load(layout, b, h, true);
        dO.assign(T * D, 0.f), delta.assign(T, 0.f);
        dq.assign(T * D, 0.f), dk.assign(T * D, 0.f), dv.assign(T * D, 0.f);
        for (int64_t t = 0; t < T; ++t) {
          const float* g = dout + (b * T + t) * C + h * D;
          const float* o = out + (b * T + t) * C + h * D;
          float s = 0.f;
          for (int64_t d = 0; d < D; ++d) {
            dO[t * D + d] = g[d];
            s += g[d] * o[d];
          }
          delta[t] = s;
        }
        const float* L = lse + (b * H + h) * T;
        for (int64_t j0 = 0; j0 < T; j0 += kBc) {
          int64_t cols = std::min(kBc, T - j0);
          for (int64_t i0 = (j0 / kBr) * kBr; i0 < T; i0 += kBr) {
            int64_t rows = std::min(kBr, T - i0);
            score_tile(S.data(), hv.q.data(), hv.kt.data(), i0, rows, j0, cols, T, D);
            score_tile(dP.data(), dO.data(), hv.vt.data(), i0, rows, j0, cols, T, D);
            for (int64_t r = 0; r < rows; ++r) {
              int64_t i = i0 + r;
              int64_t valid = std::min(cols, i - j0 + 1);
              if (valid <= 0) continue;
              float* s = S.data() + r * kBc;
              float* dp = dP.data() + r * kBc;
              const float* go = dO.data() + i * D;
              const float* qi = hv.q.data() + i * D;
              float* dqi = dq.data() + i * D;
              for (int64_t c = 0; c < valid; ++c) {
                float p = exp_fast(s[c] - L[i]);
                float ds = p * (dp[c] - delta[i]);
                float* dvj = dv.data() + (j0 + c) * D;
                float* dkj = dk.data() + (j0 + c) * D;
                const float* kj = hv.k.data() + (j0 + c) * D;
#pragma omp simd
                for (int64_t d = 0; d < D; ++d) {
                  dvj[d] += p * go[d];
                  dkj[d] += ds * qi[d];
                  dqi[d] += ds * kj[d];
                }
              }
            }
          }
        }
        // q was pre-scaled, so dk already carries 1/sqrt(D).
        const int64_t g = layout.group(h);
        float* share = per_group > 1 ? shares.data() + 2 * (b * H + h) * T * D : nullptr;
        for (int64_t t = 0; t < T; ++t) {
          float* dqr = dq_out + (b * T + t) * ldq + h * D;
          for (int64_t d = 0; d < D; ++d) dqr[d] = dq[t * D + d] * scale;
          if (share) continue;
          float* dkr = dk_out + (b * T + t) * ldkv + g * D;
          float* dvr = dv_out + (b * T + t) * ldkv + g * D;
          for (int64_t d = 0; d < D; ++d) dkr[d] = dk[t * D + d], dvr[d] = dv[t * D + d];
        }
        if (share) {
          std::copy(dk.begin(), dk.end(), share);
          std::copy(dv.begin(), dv.end(), share + T * D);
        }
      }
    }
  }
  if (per_group > 1) sum_group_shares(dk_out, dv_out, shares.data(), ldkv, B, T, H, Hkv, D);
}

// The multi-head layout: rows of [q (H*D) | k (H*D) | v (H*D)].
void attention_fwd(float* out, float* lse, const float* qkv, int64_t B, int64_t T, int64_t H,
                   int64_t D) {
  const int64_t C = H * D;
  attention_gqa_fwd(out, lse, qkv, qkv + C, qkv + 2 * C, 3 * C, 3 * C, B, T, H, H, D);
}

void attention_bwd(float* dqkv, const float* dout, const float* qkv, const float* out,
                   const float* lse, int64_t B, int64_t T, int64_t H, int64_t D) {
  const int64_t C = H * D;
  attention_gqa_bwd(dqkv, dqkv + C, dqkv + 2 * C, dout, qkv, qkv + C, qkv + 2 * C, out, lse, 3 * C,
                    3 * C, B, T, H, H, D);
}

}  // namespace loom::cpu
