// Causal grouped-query attention as tiled online softmax (Dao et al., FlashAttention 1 and 2).
// Work is split over (batch, query head) pairs; within one pair, queries go in blocks of kBr rows
// and keys in blocks of up to kBc columns, so the largest score buffer is kBr x kBc, never T x T.
// A query head reads its group's key/value head where it lies: no head is copied, and K and V
// are never repeated in memory.
//
// Each tile's products are GEMMs through cpu::gemm (one single-threaded call inside the parallel
// region): S = Q_i K_j^T and out += P V_j forward; S, dP = dO_i V_j^T, then dV_j += P^T dO_i,
// dK_j += dS^T Q_i and dQ_i += dS K_j backward, with P and dS zero past the causal limit and the
// keys no row of the tile sees left out. As FlashAttention-2 does on a GPU, the work between the
// products is element-wise on one tile, so the products run at GEMM speed rather than as one
// multiply-add per score and channel. Wide key tiles (256) make few, larger calls: at T 256 a
// query tile's keys are one tile, and the online softmax's rescaling starts beyond that.
#include <algorithm>
#include <cmath>
#include <limits>
#include <loom/bf16.hpp>
#include <vector>

#include "ops/cpu/kernels.hpp"
#include "ops/cpu/vec_math.hpp"

namespace loom::cpu {

namespace {

constexpr int64_t kBr = 64;   // query rows per tile
constexpr int64_t kBc = 256;  // key columns per tile

// Where one (sequence, query head) pair's rows lie. fp32 Q, K and V are read in place, through
// their leading dimensions, so no head is copied: row t of query head h of sequence b is at
// q_head(b, h) + t * ldq, and a query head reads its group's key/value head. bf16 ones (`dtype`)
// are widened a head at a time into the thread's own rows (Head), so the products are fp32's on
// the stored values.
struct Layout {
  const void *q, *k, *v;
  int32_t dtype;
  int64_t ldq, ldkv, Tq, Tk, H, Hkv, D;
  int64_t group(int64_t h) const { return h / (H / Hkv); }
  int64_t q_at(int64_t b, int64_t h) const { return b * Tq * ldq + h * D; }
  int64_t kv_at(int64_t b, int64_t h) const { return b * Tk * ldkv + group(h) * D; }
};

// One pair's q, k and v as fp32 rows: in place (fp32), or widened into the thread's HeadRows
// (bf16, stride D).
struct Head {
  const float *q, *k, *v;
  int64_t ldq, ldkv;
};

// A thread's widened rows: q of its pair, k and v of the key/value head it widened last. A
// group's query heads are consecutive in a thread's share of the pairs, so each key/value head is
// widened once per run of them.
struct HeadRows {
  std::vector<float> q, k, v;
  int64_t kv_at = -1;
};

const float* widen_rows(std::vector<float>& into, const void* base, int64_t at, int64_t n,
                        int64_t ld, int64_t D) {
  const uint16_t* from = static_cast<const uint16_t*>(base) + at;
  into.resize(static_cast<size_t>(n * D));
  for (int64_t t = 0; t < n; ++t)
#pragma omp simd
    for (int64_t d = 0; d < D; ++d) into[t * D + d] = sdk::bf16_to_f32(from[t * ld + d]);
  return into.data();
}

Head head(const Layout& L, int64_t b, int64_t h, HeadRows& rows) {
  const int64_t kv = L.kv_at(b, h);
  if (L.dtype != LOOM_BF16) {
    const auto* q = static_cast<const float*>(L.q);
    const auto *k = static_cast<const float*>(L.k), *v = static_cast<const float*>(L.v);
    return {q + L.q_at(b, h), k + kv, v + kv, L.ldq, L.ldkv};
  }
  if (rows.kv_at != kv) {
    widen_rows(rows.k, L.k, kv, L.Tk, L.ldkv, L.D);
    widen_rows(rows.v, L.v, kv, L.Tk, L.ldkv, L.D);
    rows.kv_at = kv;
  }
  return {widen_rows(rows.q, L.q, L.q_at(b, h), L.Tq, L.ldq, L.D), rows.k.data(), rows.v.data(),
          L.D, L.D};
}

// visible[i]: how many keys query i sees. Positions ascend, so they are a prefix: the keys whose
// position is at most the query's (causal). Without positions, query i and key i share position i.
std::vector<int64_t> visible_keys(int64_t Tq, int64_t Tk, const int64_t* qpos,
                                  const int64_t* kpos) {
  std::vector<int64_t> n(Tq);
  int64_t j = 0;
  for (int64_t i = 0; i < Tq; ++i) {
    const int64_t p = qpos ? qpos[i] : i;
    while (j < Tk && (kpos ? kpos[j] : j) <= p) ++j;
    n[i] = j;
  }
  return n;
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

// For each query row i (causal: keys j at positions up to i's), with s_ij = q_i . k_j / sqrt(D):
//   m_i = max_j s_ij,  l_i = sum_j exp(s_ij - m_i),  out_i = sum_j exp(s_ij - m_i) v_j / l_i
// computed in one pass over key tiles by rescaling the running (m, l, acc) whenever m grows.
// lse_i = m_i + log l_i is saved for backward. A query that sees no key gets out_i = 0 and
// lse_i = -inf, which attention_merge treats as an empty part.
void attention_block_fwd(float* out, float* lse, const void* q, const void* k, const void* v,
                         int32_t qkv_dtype, int64_t ldq, int64_t ldkv, int64_t B, int64_t Tq,
                         int64_t Tk, int64_t H, int64_t Hkv, int64_t D, const int64_t* qpos,
                         const int64_t* kpos) {
  const int64_t C = H * D;
  const Layout L{q, k, v, qkv_dtype, ldq, ldkv, Tq, Tk, H, Hkv, D};
  const float scale = 1.f / std::sqrt(static_cast<float>(D));
  const std::vector<int64_t> visible = visible_keys(Tq, Tk, qpos, kpos);
#pragma omp parallel
  {
    std::vector<float> S(kBr * kBc), acc(kBr * D), m(kBr), l(kBr);
    HeadRows rows_of;
#pragma omp for schedule(static) collapse(2)
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t h = 0; h < H; ++h) {
        const Head hd = head(L, b, h, rows_of);
        const float *qh = hd.q, *kh = hd.k, *vh = hd.v;
        for (int64_t i0 = 0; i0 < Tq; i0 += kBr) {
          int64_t rows = std::min(kBr, Tq - i0);
          const int64_t keys = visible[i0 + rows - 1];  // the tile's last row sees the most
          std::fill(m.begin(), m.end(), -std::numeric_limits<float>::infinity());
          std::fill(l.begin(), l.end(), 0.f);
          std::fill(acc.begin(), acc.end(), 0.f);
          for (int64_t j0 = 0; j0 < keys; j0 += kBc) {
            int64_t cols = std::min(kBc, keys - j0);
            // S = Q_i K_j^T / sqrt(D)
            gemm(0, 1, rows, cols, D, scale, qh + i0 * hd.ldq, hd.ldq, kh + j0 * hd.ldkv, hd.ldkv,
                 0.f, S.data(), kBc);
            for (int64_t r = 0; r < rows; ++r) {
              float* s = S.data() + r * kBc;
              int64_t valid =
                  std::max<int64_t>(0, std::min(cols, visible[i0 + r] - j0));  // causal limit
              // Both reductions in vector lanes: in order, each is a chain of dependent
              // scalar operations, and the max alone took a third of the forward's time.
              float mx = m[r];
#pragma omp simd reduction(max : mx)
              for (int64_t c = 0; c < valid; ++c) mx = s[c] > mx ? s[c] : mx;
              float alpha = valid > 0 ? exp_fast(m[r] - mx) : 1.f;
              float sum = 0.f;
#pragma omp simd reduction(+ : sum)
              for (int64_t c = 0; c < valid; ++c) {
                s[c] = exp_fast(s[c] - mx);
                sum += s[c];
              }
              for (int64_t c = valid; c < cols; ++c) s[c] = 0.f;
              if (valid == 0) continue;
              l[r] = l[r] * alpha + sum;
              m[r] = mx;
              float* a = acc.data() + r * D;
#pragma omp simd
              for (int64_t d = 0; d < D; ++d) a[d] *= alpha;
            }
            // acc += P V_j
            gemm(0, 0, rows, D, cols, 1.f, S.data(), kBc, vh + j0 * hd.ldkv, hd.ldkv, 1.f,
                 acc.data(), D);
          }
          for (int64_t r = 0; r < rows; ++r) {
            int64_t t = i0 + r;
            float* o = out + (b * Tq + t) * C + h * D;
            if (l[r] == 0.f) {  // no visible key
              for (int64_t d = 0; d < D; ++d) o[d] = 0.f;
              lse[(b * H + h) * Tq + t] = -std::numeric_limits<float>::infinity();
              continue;
            }
            float inv = 1.f / l[r];
            for (int64_t d = 0; d < D; ++d) o[d] = acc[r * D + d] * inv;
            lse[(b * H + h) * Tq + t] = m[r] + std::log(l[r]);
          }
        }
      }
    }
  }
}

namespace {

// delta_t = dO_t . O_t for each query row of one head: the row term of the softmax backward
// (dS = P (dP - delta)). dO and O are rows of ld floats.
void row_deltas(const float* dO, const float* O, int64_t ld, int64_t Tq, int64_t D, float* delta) {
  for (int64_t t = 0; t < Tq; ++t) {
    const float *g = dO + t * ld, *o = O + t * ld;
    float s = 0.f;
#pragma omp simd reduction(+ : s)
    for (int64_t d = 0; d < D; ++d) s += g[d] * o[d];
    delta[t] = s;
  }
}

void zero_rows(float* x, int64_t ld, int64_t rows, int64_t D) {
  for (int64_t t = 0; t < rows; ++t) std::fill(x + t * ld, x + t * ld + D, 0.f);
}

// One (sequence, query head) pair's backward, every product a GEMM on a tile, each gradient
// accumulated where it goes: dq in its rows of dq_out (ldq), dk and dv in rows of ldkv floats
// (the head's own rows of dk_out and dv_out, or its share of a group's).
struct HeadGrads {
  float *dq, *dk, *dv;
  int64_t ldkv;
};

void head_bwd(const Layout& L, const Head& hd, const float* dO, const float* O, int64_t C,
              const float* lse, const std::vector<int64_t>& visible, const HeadGrads& g,
              std::vector<float>& S, std::vector<float>& dP, std::vector<float>& delta) {
  // q, k and v are read through hd's strides; dq is written in q's own layout (L.ldq).
  const int64_t Tq = L.Tq, Tk = L.Tk, D = L.D, ldq = L.ldq, ldkv = hd.ldkv;
  const float scale = 1.f / std::sqrt(static_cast<float>(D));
  const float *qh = hd.q, *kh = hd.k, *vh = hd.v;
  row_deltas(dO, O, C, Tq, D, delta.data());
  zero_rows(g.dq, ldq, Tq, D), zero_rows(g.dk, g.ldkv, Tk, D), zero_rows(g.dv, g.ldkv, Tk, D);
  for (int64_t j0 = 0; j0 < Tk; j0 += kBc) {
    const int64_t key_cols = std::min(kBc, Tk - j0);
    // The first query that sees key j0, rounded down to its tile.
    const int64_t first = std::upper_bound(visible.begin(), visible.end(), j0) - visible.begin();
    if (first == Tq) break;  // no query sees key j0, nor any key after it
    const float *kj = kh + j0 * ldkv, *vj = vh + j0 * ldkv;
    for (int64_t i0 = (first / kBr) * kBr; i0 < Tq; i0 += kBr) {
      const int64_t rows = std::min(kBr, Tq - i0);
      // Keys past what the tile's last row sees are zero in P and dS: leave them out.
      const int64_t cols = std::min(key_cols, visible[i0 + rows - 1] - j0);
      const float *qi = qh + i0 * hd.ldq, *go = dO + i0 * C;
      // S = Q_i K_j^T / sqrt(D), dP = dO_i V_j^T
      gemm(0, 1, rows, cols, D, scale, qi, hd.ldq, kj, ldkv, 0.f, S.data(), kBc);
      gemm(0, 1, rows, cols, D, 1.f, go, C, vj, ldkv, 0.f, dP.data(), kBc);
      // S becomes P, dP becomes dS; 0 past the causal limit
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t i = i0 + r, valid = std::max<int64_t>(0, std::min(cols, visible[i] - j0));
        float *s = S.data() + r * kBc, *dp = dP.data() + r * kBc;
        const float li = lse[i], di = delta[i];
#pragma omp simd
        for (int64_t c = 0; c < valid; ++c) {
          s[c] = exp_fast(s[c] - li);
          dp[c] = s[c] * (dp[c] - di);
        }
        for (int64_t c = valid; c < cols; ++c) s[c] = dp[c] = 0.f;
      }
      // dV_j += P^T dO_i, dK_j += dS^T Q_i / sqrt(D), dQ_i += dS K_j / sqrt(D)
      gemm(1, 0, cols, D, rows, 1.f, S.data(), kBc, go, C, 1.f, g.dv + j0 * g.ldkv, g.ldkv);
      gemm(1, 0, cols, D, rows, scale, dP.data(), kBc, qi, hd.ldq, 1.f, g.dk + j0 * g.ldkv, g.ldkv);
      gemm(0, 0, rows, D, cols, scale, dP.data(), kBc, kj, ldkv, 1.f, g.dq + i0 * ldq, ldq);
    }
  }
}

}  // namespace

// With p_ij = exp(s_ij - lse_i) recomputed per tile and Delta_i = dout_i . out_i:
//   dv_j += sum_i p_ij dout_i
//   dp_ij = dout_i . v_j,   ds_ij = p_ij (dp_ij - Delta_i)
//   dq_i += sum_j ds_ij k_j / sqrt(D),   dk_j += sum_i ds_ij q_i / sqrt(D)
// out and lse are the whole attention's (over every key block), so each block's share is exact
// on its own. A key/value head's dk and dv sum over the query heads of its group: each (batch,
// head) pair writes its share to a buffer of its own, and the shares are added in head order
// afterwards, so the result does not depend on the thread count. With one head per group they go
// straight to dk and dv.
void attention_block_bwd(float* dq_out, float* dk_out, float* dv_out, const float* dout,
                         const void* q, const void* k, const void* v, int32_t qkv_dtype,
                         const float* out, const float* lse, int64_t ldq, int64_t ldkv, int64_t B,
                         int64_t Tq, int64_t Tk, int64_t H, int64_t Hkv, int64_t D,
                         const int64_t* qpos, const int64_t* kpos) {
  const int64_t C = H * D, per_group = H / Hkv;
  const Layout layout{q, k, v, qkv_dtype, ldq, ldkv, Tq, Tk, H, Hkv, D};
  const std::vector<int64_t> visible = visible_keys(Tq, Tk, qpos, kpos);
  std::vector<float> shares(per_group > 1 ? 2 * B * H * Tk * D : 0);
#pragma omp parallel
  {
    std::vector<float> S(kBr * kBc), dP(kBr * kBc), delta(Tq);
    HeadRows rows_of;
#pragma omp for schedule(static) collapse(2)
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t h = 0; h < H; ++h) {
        const int64_t at = (b * Tq) * C + h * D;  // the head's first row of dout and out
        HeadGrads g{dq_out + b * Tq * ldq + h * D, dk_out + b * Tk * ldkv + layout.group(h) * D,
                    dv_out + b * Tk * ldkv + layout.group(h) * D, ldkv};
        if (per_group > 1) {
          float* share = shares.data() + 2 * (b * H + h) * Tk * D;
          g.dk = share, g.dv = share + Tk * D, g.ldkv = D;
        }
        head_bwd(layout, head(layout, b, h, rows_of), dout + at, out + at, C,
                 lse + (b * H + h) * Tq, visible, g, S, dP, delta);
      }
    }
  }
  if (per_group > 1) sum_group_shares(dk_out, dv_out, shares.data(), ldkv, B, Tk, H, Hkv, D);
}

void attention_block_fwd(float* out, float* lse, const float* q, const float* k, const float* v,
                         int64_t ldq, int64_t ldkv, int64_t B, int64_t Tq, int64_t Tk, int64_t H,
                         int64_t Hkv, int64_t D, const int64_t* qpos, const int64_t* kpos) {
  attention_block_fwd(out, lse, q, k, v, LOOM_F32, ldq, ldkv, B, Tq, Tk, H, Hkv, D, qpos, kpos);
}

void attention_block_bwd(float* dq, float* dk, float* dv, const float* dout, const float* q,
                         const float* k, const float* v, const float* out, const float* lse,
                         int64_t ldq, int64_t ldkv, int64_t B, int64_t Tq, int64_t Tk, int64_t H,
                         int64_t Hkv, int64_t D, const int64_t* qpos, const int64_t* kpos) {
  attention_block_bwd(dq, dk, dv, dout, q, k, v, LOOM_F32, out, lse, ldq, ldkv, B, Tq, Tk, H, Hkv,
                      D, qpos, kpos);
}

void attention_gqa_fwd(float* out, float* lse, const float* q, const float* k, const float* v,
                       int64_t ldq, int64_t ldkv, int64_t B, int64_t T, int64_t H, int64_t Hkv,
                       int64_t D) {
  attention_block_fwd(out, lse, q, k, v, ldq, ldkv, B, T, T, H, Hkv, D, nullptr, nullptr);
}

void attention_gqa_bwd(float* dq, float* dk, float* dv, const float* dout, const float* q,
                       const float* k, const float* v, const float* out, const float* lse,
                       int64_t ldq, int64_t ldkv, int64_t B, int64_t T, int64_t H, int64_t Hkv,
                       int64_t D) {
  attention_block_bwd(dq, dk, dv, dout, q, k, v, out, lse, ldq, ldkv, B, T, T, H, Hkv, D, nullptr,
                      nullptr);
}

// Two attentions of the same queries over disjoint key sets, combined as one over their union:
//   lse = log(exp(lse_a) + exp(lse_b)),  out = out_a exp(lse_a - lse) + out_b exp(lse_b - lse)
// (out = a, part = b; an empty part has lse = -inf).
void attention_merge(float* out, float* lse, const float* part, const float* part_lse, int64_t B,
                     int64_t T, int64_t H, int64_t D) {
  const int64_t C = H * D;
  const float ninf = -std::numeric_limits<float>::infinity();
#pragma omp parallel for schedule(static) collapse(2)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t t = 0; t < T; ++t) {
        float& la = lse[(b * H + h) * T + t];
        const float lb = part_lse[(b * H + h) * T + t];
        if (lb == ninf) continue;
        float* o = out + (b * T + t) * C + h * D;
        const float* p = part + (b * T + t) * C + h * D;
        const float mx = std::max(la, lb);
        const float l = mx + std::log(std::exp(la - mx) + std::exp(lb - mx));
        const float wa = la == ninf ? 0.f : std::exp(la - l), wb = std::exp(lb - l);
        for (int64_t d = 0; d < D; ++d) o[d] = o[d] * wa + p[d] * wb;
        la = l;
      }
    }
  }
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
