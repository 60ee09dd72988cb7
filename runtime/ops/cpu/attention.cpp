// Causal multi-head attention as tiled online softmax (Dao et al., FlashAttention 1 and 2).
// Work is split over (batch, head) pairs; within one pair, queries go in blocks of kBr rows and
// keys in blocks of kBc columns, so the largest score buffer is kBr x kBc, never T x T.
#include <cmath>
#include <limits>
#include <vector>

#include "ops/cpu/kernels.hpp"
#include "ops/cpu/vec_math.hpp"

namespace loom::cpu {

namespace {

constexpr int64_t kBr = 32;  // query rows per tile
constexpr int64_t kBc = 64;  // key columns per tile

// One head of one sequence, copied out of the interleaved qkv rows into contiguous buffers:
// q (T x D, pre-scaled by 1/sqrt(D)), k (T x D), v (T x D) and the transposes kt, vt (D x T)
// that let score tiles be built as outer products with unit-stride inner loops.
struct HeadView {
  std::vector<float> q, k, v, kt, vt;
  void load(const float* qkv, int64_t b, int64_t h, int64_t T, int64_t H, int64_t D, bool need_vt) {
    int64_t C = H * D;
    float s = 1.f / std::sqrt(static_cast<float>(D));
    q.resize(T * D), k.resize(T * D), v.resize(T * D), kt.resize(D * T);
    if (need_vt) vt.resize(D * T);
    for (int64_t t = 0; t < T; ++t) {
      const float* row = qkv + (b * T + t) * 3 * C + h * D;
      for (int64_t d = 0; d < D; ++d) {
        q[t * D + d] = row[d] * s;
        k[t * D + d] = row[C + d];
        v[t * D + d] = row[2 * C + d];
        kt[d * T + t] = row[C + d];
        if (need_vt) vt[d * T + t] = row[2 * C + d];
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

}  // namespace

// For each query row i (causal: keys j <= i), with s_ij = q_i . k_j / sqrt(D):
//   m_i = max_j s_ij,  l_i = sum_j exp(s_ij - m_i),  out_i = sum_j exp(s_ij - m_i) v_j / l_i
// computed in one pass over key tiles by rescaling the running (m, l, acc) whenever m grows.
// lse_i = m_i + log l_i is saved for backward.
void attention_fwd(float* out, float* lse, const float* qkv, int64_t B, int64_t T, int64_t H,
                   int64_t D) {
  const int64_t C = H * D;
#pragma omp parallel
  {
    HeadView hv;
    std::vector<float> S(kBr * kBc), acc(kBr * D), m(kBr), l(kBr);
#pragma omp for schedule(static) collapse(2)
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t h = 0; h < H; ++h) {
        hv.load(qkv, b, h, T, H, D, false);
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
void attention_bwd(float* dqkv, const float* dout, const float* qkv, const float* out,
                   const float* lse, int64_t B, int64_t T, int64_t H, int64_t D) {
  const int64_t C = H * D;
  const float scale = 1.f / std::sqrt(static_cast<float>(D));
#pragma omp parallel
  {
    HeadView hv;
    std::vector<float> S(kBr * kBc), dP(kBr * kBc);
    std::vector<float> dO, delta, dq, dk, dv;
#pragma omp for schedule(static) collapse(2)
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t h = 0; h < H; ++h) {
        hv.load(qkv, b, h, T, H, D, true);
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
        for (int64_t t = 0; t < T; ++t) {
          float* row = dqkv + (b * T + t) * 3 * C + h * D;
          for (int64_t d = 0; d < D; ++d) {
            row[d] = dq[t * D + d] * scale;
            row[C + d] = dk[t * D + d];  // q was pre-scaled, so dk already carries 1/sqrt(D)
            row[2 * C + d] = dv[t * D + d];
          }
        }
      }
    }
  }
}

}  // namespace loom::cpu
