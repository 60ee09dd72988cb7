// Causal grouped-query attention, tiled with an online softmax (FlashAttention-2, Dao 2023):
// no Tq x Tk matrix exists and no atomics are used.
//
// Forward, one block per (16 queries, sequence, head), on a one-dimensional grid; 4 warps, 4 query
// rows each. The block's queries sit in shared memory; it walks the keys in tiles of 32 (one key
// per lane) up to the last key its last query sees, and per row keeps a running max m, a running
// sum l = sum exp(s - m) and acc = sum exp(s - m) v, rescaled by exp(m_old - m_new) when the max
// grows: out = acc / l, lse = m + log l (a row with no visible key: out 0, lse -inf).
//
// Backward recomputes the probabilities p = exp(s - lse) from the saved lse, with
// delta_i = dout_i . out_i (one warp per row) and ds = p (dout_i . v_j - delta_i):
//   dQ_i = sum_j ds_ij k_j / sqrt(D)      one block per query tile, walking key tiles;
//   dK_j = sum_i ds_ij q_i / sqrt(D),     one block per tile of 16 keys of one key/value head,
//   dV_j = sum_i p_ij dout_i              walking every query tile of every head of its group
//                                         that sees a key of the tile; each key row is written
//                                         once by the block that owns it.
// The block form takes Tq queries over Tk keys at given positions (context parallelism);
// attention_merge folds two blocks' results. Head dimension up to kMaxD; the kernels are
// instantiated for 2, 4 or 8 channels per lane, so registers follow the head dimension.
#pragma once

#include <stdexcept>
#include <string>

#include "ops/cuda/device.cuh"

namespace loom::cuda::attention {

constexpr int kMaxD = 256;
constexpr int kThreads = 128, kWarps = kThreads / kWarp;
constexpr int kBr = 16, kRowsPerWarp = kBr / kWarps;      // forward and dQ: query rows per block
constexpr int kBc = 32;                                   // keys per tile: one per lane
constexpr int kKeys = 16, kKeysPerWarp = kKeys / kWarps;  // dK/dV: keys per block
constexpr int kRows = 32;  // dK/dV: query rows per tile, one per lane

// Where the heads lie: q rows ldq apart (head h at h*D, Tq rows per sequence), k and v rows
// ldkv apart (head g at g*D, Tk rows per sequence); query head h reads key/value head
// h / (H / Hkv). qpos and kpos (ascending, shared by every sequence) place queries and keys;
// null means 0, 1, 2, ...; key j is visible to query i when kpos[j] <= qpos[i].
struct Layout {
  const float *q, *k, *v;
  int64_t ldq, ldkv, Tq, Tk, H, Hkv, D;
  const int64_t *qpos, *kpos;

  __device__ int64_t qp(int64_t i) const { return qpos ? qpos[i] : i; }
  __device__ int64_t kp(int64_t j) const { return kpos ? kpos[j] : j; }
  // n_i = #{j : kpos[j] <= qpos[i]}: positions ascend, so these are the first n_i keys.
  __device__ int64_t visible_keys(int64_t i) const {
    const int64_t p = qp(i);
    int64_t lo = 0, hi = Tk;
    while (lo < hi) {
      const int64_t mid = (lo + hi) / 2;
      if (kp(mid) <= p)
        lo = mid + 1;
      else
        hi = mid;
    }
    return lo;
  }
  // The first query that sees key j (Tq when none does).
  __device__ int64_t first_query(int64_t j) const {
    const int64_t p = kp(j);
    int64_t lo = 0, hi = Tq;
    while (lo < hi) {
      const int64_t mid = (lo + hi) / 2;
      if (qp(mid) < p)
        lo = mid + 1;
      else
        hi = mid;
    }
    return lo;
  }
};

// dst[r, 0:D] = src[r * ld_src + 0:D] for r < valid, else 0; dst rows ld_dst apart. Every
// thread of the block takes part.
__device__ inline void load_rows(SharedPtr<float> dst, int64_t ld_dst, const float* src,
                                 int64_t ld_src, int64_t valid, int rows, int64_t D) {
  for (int64_t e = threadIdx.x; e < rows * D; e += blockDim.x) {
    const int64_t r = e / D, d = e % D;
    dst[r * ld_dst + d] = r < valid ? src[r * ld_src + d] : 0.f;
  }
}

// a[0:D] . b[0:D], both in shared memory.
__device__ inline float dot(SharedPtr<float> a, SharedPtr<float> b, int64_t D) {
  float s = 0.f;
  for (int64_t d = 0; d < D; ++d) s += a[d] * b[d];
  return s;
}

template <int PL>
__global__ void __launch_bounds__(kThreads, 1) attention_fwd_k(float* out, float* lse, Layout L) {
  LOOM_DYNAMIC_SHARED(float, smem);
  const int64_t D = L.D, ld = D + 1, tiles = (L.Tq + kBr - 1) / kBr;
  SharedPtr<float> Qs = carve(smem, 0, kBr * D, "Qs"), Ks = carve(smem, kBr * D, kBc * ld, "Ks"),
                   Vs = carve(smem, kBr * D + kBc * ld, kBc * ld, "Vs"),
                   Ps = carve(smem, kBr * D + 2 * kBc * ld, kBr * kBc, "Ps");
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t bh = blockIdx.x / tiles, b = bh / L.H, h = bh % L.H, g = h / (L.H / L.Hkv),
                i0 = (blockIdx.x % tiles) * kBr;
  load_rows(Qs, D, L.q + (b * L.Tq + i0) * L.ldq + h * D, L.ldq, L.Tq - i0, kBr, D);
  float acc[kRowsPerWarp][PL] = {}, m[kRowsPerWarp], l[kRowsPerWarp];
  int64_t n[kRowsPerWarp];
  LOOM_UNROLL for (int k = 0; k < kRowsPerWarp; ++k) {
    const int64_t i = i0 + warp * kRowsPerWarp + k;
    m[k] = -INFINITY, l[k] = 0.f, n[k] = i < L.Tq ? L.visible_keys(i) : 0;
  }
  const int64_t keys =
      L.visible_keys(i0 + kBr <= L.Tq ? i0 + kBr - 1 : L.Tq - 1);  // the most any row sees
  const float scale = rsqrtf(static_cast<float>(D));
  for (int64_t j0 = 0; j0 < keys; j0 += kBc) {
    __syncthreads();  // the previous tile is read
    const int64_t at = (b * L.Tk + j0) * L.ldkv + g * D;
    load_rows(Ks, ld, L.k + at, L.ldkv, L.Tk - j0, kBc, D);
    load_rows(Vs, ld, L.v + at, L.ldkv, L.Tk - j0, kBc, D);
    __syncthreads();
    LOOM_UNROLL for (int k = 0; k < kRowsPerWarp; ++k) {
      const int r = warp * kRowsPerWarp + k;
      const bool seen = j0 + lane < n[k];
      const float s = seen ? dot(Qs + r * D, Ks + lane * ld, D) * scale : -INFINITY;
      const float m_new = fmaxf(m[k], warp_max(s));
      if (m_new == -INFINITY) continue;  // the whole warp: no key seen by this row yet
      const float corr = expf(m[k] - m_new), p = seen ? expf(s - m_new) : 0.f;
      l[k] = l[k] * corr + warp_sum(p);
      m[k] = m_new;
      Ps[r * kBc + lane] = p;
      __syncwarp();
      LOOM_UNROLL for (int u = 0; u < PL; ++u) {
        const int64_t d = lane + u * kWarp;
        if (d >= D) continue;
        float a = acc[k][u] * corr;
        LOOM_UNROLL_BY(8) for (int jj = 0; jj < kBc; ++jj) a += Ps[r * kBc + jj] * Vs[jj * ld + d];
        acc[k][u] = a;
      }
    }
  }
  LOOM_UNROLL for (int k = 0; k < kRowsPerWarp; ++k) {
    const int64_t i = i0 + warp * kRowsPerWarp + k;
    if (i >= L.Tq) break;
    float* o = out + (b * L.Tq + i) * L.H * D + h * D;
    LOOM_UNROLL for (int u = 0; u < PL; ++u) if (lane + u * kWarp < D) o[lane + u * kWarp] =
        l[k] > 0.f ? acc[k][u] / l[k] : 0.f;
    if (lane == 0) lse[(b * L.H + h) * L.Tq + i] = l[k] > 0.f ? m[k] + logf(l[k]) : -INFINITY;
  }
}

// delta[(b H + h) Tq + i] = dout_i . out_i, one warp per row.
__global__ void attention_delta_k(float* delta, const float* dout, const float* out, int64_t rows,
                                  int64_t Tq, int64_t H, int64_t D) {
  const int64_t w = blockIdx.x * static_cast<int64_t>(kBlock / kWarp) + threadIdx.x / kWarp;
  if (w >= rows) return;
  const int64_t i = w % Tq, bh = w / Tq, at = ((bh / H) * Tq + i) * H * D + (bh % H) * D;
  float s = 0.f;
  for (int64_t d = threadIdx.x % kWarp; d < D; d += kWarp) s += dout[at + d] * out[at + d];
  s = warp_sum(s);
  if (threadIdx.x % kWarp == 0) delta[w] = s;
}

template <int PL>
__global__ void __launch_bounds__(kThreads, 1)
    attention_dq_k(float* dq_out, const float* dout, const float* lse, const float* delta,
                   Layout L) {
  LOOM_DYNAMIC_SHARED(float, smem);
  const int64_t D = L.D, ld = D + 1, tiles = (L.Tq + kBr - 1) / kBr;
  SharedPtr<float> Qs = carve(smem, 0, kBr * D, "Qs"), dOs = carve(smem, kBr * D, kBr * D, "dOs"),
                   Ks = carve(smem, 2 * kBr * D, kBc * ld, "Ks"),
                   Vs = carve(smem, 2 * kBr * D + kBc * ld, kBc * ld, "Vs"),
                   Ps = carve(smem, 2 * kBr * D + 2 * kBc * ld, kBr * kBc, "Ps");
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t bh = blockIdx.x / tiles, b = bh / L.H, h = bh % L.H, g = h / (L.H / L.Hkv),
                i0 = (blockIdx.x % tiles) * kBr;
  load_rows(Qs, D, L.q + (b * L.Tq + i0) * L.ldq + h * D, L.ldq, L.Tq - i0, kBr, D);
  load_rows(dOs, D, dout + (b * L.Tq + i0) * L.H * D + h * D, L.H * D, L.Tq - i0, kBr, D);
  float dq[kRowsPerWarp][PL] = {}, lse_r[kRowsPerWarp], delta_r[kRowsPerWarp];
  int64_t n[kRowsPerWarp];
  LOOM_UNROLL for (int k = 0; k < kRowsPerWarp; ++k) {
    const int64_t i = i0 + warp * kRowsPerWarp + k, at = (b * L.H + h) * L.Tq + i;
    n[k] = i < L.Tq ? L.visible_keys(i) : 0;
    lse_r[k] = n[k] ? lse[at] : 0.f, delta_r[k] = n[k] ? delta[at] : 0.f;
  }
  const int64_t keys = L.visible_keys(i0 + kBr <= L.Tq ? i0 + kBr - 1 : L.Tq - 1);
  const float scale = rsqrtf(static_cast<float>(D));
  for (int64_t j0 = 0; j0 < keys; j0 += kBc) {
    __syncthreads();
    const int64_t at = (b * L.Tk + j0) * L.ldkv + g * D;
    load_rows(Ks, ld, L.k + at, L.ldkv, L.Tk - j0, kBc, D);
    load_rows(Vs, ld, L.v + at, L.ldkv, L.Tk - j0, kBc, D);
    __syncthreads();
    LOOM_UNROLL for (int k = 0; k < kRowsPerWarp; ++k) {
      if (n[k] <= j0) continue;  // the whole warp: this row sees no key of the tile
      const int r = warp * kRowsPerWarp + k;
      float ds = 0.f;
      if (j0 + lane < n[k]) {
        const float p = expf(dot(Qs + r * D, Ks + lane * ld, D) * scale - lse_r[k]);
        ds = p * (dot(dOs + r * D, Vs + lane * ld, D) - delta_r[k]);
      }
      Ps[r * kBc + lane] = ds;
      __syncwarp();
      LOOM_UNROLL for (int u = 0; u < PL; ++u) {
        const int64_t d = lane + u * kWarp;
        if (d >= D) continue;
        float a = dq[k][u];
        LOOM_UNROLL_BY(8) for (int jj = 0; jj < kBc; ++jj) a += Ps[r * kBc + jj] * Ks[jj * ld + d];
        dq[k][u] = a;
      }
    }
  }
  LOOM_UNROLL for (int k = 0; k < kRowsPerWarp; ++k) {
    const int64_t i = i0 + warp * kRowsPerWarp + k;
    if (i >= L.Tq) break;
    float* o = dq_out + (b * L.Tq + i) * L.ldq + h * D;
    LOOM_UNROLL for (int u = 0; u < PL; ++u) if (lane + u * kWarp < D) o[lane + u * kWarp] =
        dq[k][u] * scale;
  }
}

template <int PL>
__global__ void __launch_bounds__(kThreads, 1)
    attention_dkdv_k(float* dk_out, float* dv_out, const float* dout, const float* lse,
                     const float* delta, Layout L) {
  LOOM_DYNAMIC_SHARED(float, smem);
  const int64_t D = L.D, ld = D + 1;
  const int64_t kv = 2 * kKeys * D, rows = kv + 2 * kRows * ld, tiles = (L.Tk + kKeys - 1) / kKeys;
  SharedPtr<float> Ks = carve(smem, 0, kKeys * D, "Ks"),
                   Vs = carve(smem, kKeys * D, kKeys * D, "Vs"),
                   Qs = carve(smem, kv, kRows * ld, "Qs"),
                   dOs = carve(smem, kv + kRows * ld, kRows * ld, "dOs"),
                   Pw = carve(smem, rows, kWarps * kRows, "Pw"),
                   Sw = carve(smem, rows + kWarps * kRows, kWarps * kRows, "Sw");
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t bg = blockIdx.x / tiles, b = bg / L.Hkv, g = bg % L.Hkv,
                j0 = (blockIdx.x % tiles) * kKeys;
  const int64_t at = (b * L.Tk + j0) * L.ldkv + g * D, group = L.H / L.Hkv;
  load_rows(Ks, D, L.k + at, L.ldkv, L.Tk - j0, kKeys, D);
  load_rows(Vs, D, L.v + at, L.ldkv, L.Tk - j0, kKeys, D);
  float dk[kKeysPerWarp][PL] = {}, dv[kKeysPerWarp][PL] = {};
  const int64_t first = L.first_query(j0);
  const float scale = rsqrtf(static_cast<float>(D));
  for (int64_t h = g * group; h < (g + 1) * group; ++h) {
    for (int64_t i0 = first; i0 < L.Tq; i0 += kRows) {
      __syncthreads();  // the previous tile is read
      load_rows(Qs, ld, L.q + (b * L.Tq + i0) * L.ldq + h * D, L.ldq, L.Tq - i0, kRows, D);
      load_rows(dOs, ld, dout + (b * L.Tq + i0) * L.H * D + h * D, L.H * D, L.Tq - i0, kRows, D);
      __syncthreads();
      const int64_t i = i0 + lane, row = (b * L.H + h) * L.Tq + i;
      LOOM_UNROLL for (int kk = 0; kk < kKeysPerWarp; ++kk) {
        const int jl = warp * kKeysPerWarp + kk;
        const int64_t j = j0 + jl;
        float p = 0.f, ds = 0.f;
        if (i < L.Tq && j < L.Tk && L.kp(j) <= L.qp(i)) {
          p = expf(dot(Qs + lane * ld, Ks + jl * D, D) * scale - lse[row]);
          ds = p * (dot(dOs + lane * ld, Vs + jl * D, D) - delta[row]);
        }
        Pw[warp * kRows + lane] = p;
        Sw[warp * kRows + lane] = ds;
        __syncwarp();
        LOOM_UNROLL for (int u = 0; u < PL; ++u) {
          const int64_t d = lane + u * kWarp;
          if (d >= D) continue;
          float a = dv[kk][u], c = dk[kk][u];
          LOOM_UNROLL_BY(8) for (int r = 0; r < kRows; ++r) {
            a += Pw[warp * kRows + r] * dOs[r * ld + d];
            c += Sw[warp * kRows + r] * Qs[r * ld + d];
          }
          dv[kk][u] = a, dk[kk][u] = c;
        }
        __syncwarp();  // Pw and Sw are rewritten for the next key
      }
    }
  }
  LOOM_UNROLL for (int kk = 0; kk < kKeysPerWarp; ++kk) {
    const int64_t j = j0 + warp * kKeysPerWarp + kk;
    if (j >= L.Tk) break;
    const int64_t o = (b * L.Tk + j) * L.ldkv + g * D;
    LOOM_UNROLL for (int u = 0; u < PL; ++u) {
      if (lane + u * kWarp >= D) continue;
      dk_out[o + lane + u * kWarp] = dk[kk][u] * scale;
      dv_out[o + lane + u * kWarp] = dv[kk][u];
    }
  }
}

// One warp per (b, h, t): with a = (out, lse) and b = (part, part_lse),
//   lse' = log(exp(lse_a) + exp(lse_b)) = mx + log(exp(lse_a - mx) + exp(lse_b - mx)), mx = max,
//   out' = out_a exp(lse_a - lse') + out_b exp(lse_b - lse').
// lse_b = -inf: an empty part, skipped; lse_a = -inf: out' = out_b (its weight is 0, not NaN).
__global__ void attention_merge_k(float* out, float* lse, const float* part, const float* part_lse,
                                  int64_t B, int64_t T, int64_t H, int64_t D) {
  const int64_t w = blockIdx.x * static_cast<int64_t>(kBlock / kWarp) + threadIdx.x / kWarp;
  if (w >= B * H * T) return;
  const int64_t t = w % T, h = (w / T) % H, b = w / (T * H);
  const int lane = threadIdx.x % kWarp;
  const int64_t at = (b * H + h) * T + t;
  const float la = lse[at], lb = part_lse[at];
  if (lb == -INFINITY) return;
  const float mx = fmaxf(la, lb), l = mx + logf(expf(la - mx) + expf(lb - mx));
  const float wa = la == -INFINITY ? 0.f : expf(la - l), wb = expf(lb - l);
  float* o = out + (b * T + t) * H * D + h * D;
  const float* p = part + (b * T + t) * H * D + h * D;
  for (int64_t d = lane; d < D; d += kWarp) o[d] = o[d] * wa + p[d] * wb;
  __syncwarp();  // every lane has read lse[at] before lane 0 overwrites it
  if (lane == 0) lse[at] = l;
}

// ---- launch sequences ----

inline void check_head_dim(int64_t D) {
  if (D > kMaxD)
    throw std::runtime_error("CUDA attention: head dimension " + std::to_string(D) + " > " +
                             std::to_string(kMaxD));
}

template <int PL, class Go>
void forward(Go& go, float* out, float* lse, const Layout& L, int64_t B) {
  const size_t shared = sizeof(float) * (kBr * L.D + 2 * kBc * (L.D + 1) + kBr * kBc);
  go(LOOM_KERNEL(attention_fwd_k<PL>),
     Shape{grid_of(blocks_for(L.Tq, kBr) * B * L.H), dim3(kThreads), shared}, out, lse, L);
}

template <int PL, class Go>
void backward(Go& go, float* dq, float* dk, float* dv, const float* dout, const float* lse,
              const float* delta, const Layout& L, int64_t B) {
  const size_t kv_shared =
      sizeof(float) * (2 * kKeys * L.D + 2 * kRows * (L.D + 1) + 2 * kWarps * kRows);
  if (B * L.Tk * L.Hkv > 0)
    go(LOOM_KERNEL(attention_dkdv_k<PL>),
       Shape{grid_of(blocks_for(L.Tk, kKeys) * B * L.Hkv), dim3(kThreads), kv_shared}, dk, dv, dout,
       lse, delta, L);
  const size_t q_shared = sizeof(float) * (2 * kBr * L.D + 2 * kBc * (L.D + 1) + kBr * kBc);
  if (B * L.Tq * L.H > 0)
    go(LOOM_KERNEL(attention_dq_k<PL>),
       Shape{grid_of(blocks_for(L.Tq, kBr) * B * L.H), dim3(kThreads), q_shared}, dq, dout, lse,
       delta, L);
}

template <class Go>
void block_fwd(Go& go, float* out, float* lse, const float* q, const float* k, const float* v,
               int64_t ldq, int64_t ldkv, int64_t B, int64_t Tq, int64_t Tk, int64_t H, int64_t Hkv,
               int64_t D, const int64_t* qpos, const int64_t* kpos) {
  check_head_dim(D);
  if (B * Tq * H == 0) return;
  const Layout L{q, k, v, ldq, ldkv, Tq, Tk, H, Hkv, D, qpos, kpos};
  if (D <= 64)
    forward<2>(go, out, lse, L, B);
  else if (D <= 128)
    forward<4>(go, out, lse, L, B);
  else
    forward<8>(go, out, lse, L, B);
}

// dk and dv are written for every key, 0 where no query sees it.
template <class Go>
void block_bwd(Go& go, float* dq, float* dk, float* dv, const float* dout, const float* q,
               const float* k, const float* v, const float* out, const float* lse, int64_t ldq,
               int64_t ldkv, int64_t B, int64_t Tq, int64_t Tk, int64_t H, int64_t Hkv, int64_t D,
               const int64_t* qpos, const int64_t* kpos) {
  check_head_dim(D);
  const Layout L{q, k, v, ldq, ldkv, Tq, Tk, H, Hkv, D, qpos, kpos};
  const int64_t rows = B * H * Tq;
  float* delta = rows > 0 ? go.template workspace<float>(rows) : nullptr;
  if (rows > 0)
    go(LOOM_KERNEL(attention_delta_k),
       Shape{grid_of(blocks_for(rows, kBlock / kWarp)), dim3(kBlock)}, delta, dout, out, rows, Tq,
       H, D);
  if (D <= 64)
    backward<2>(go, dq, dk, dv, dout, lse, delta, L, B);
  else if (D <= 128)
    backward<4>(go, dq, dk, dv, dout, lse, delta, L, B);
  else
    backward<8>(go, dq, dk, dv, dout, lse, delta, L, B);
}

template <class Go>
void merge(Go& go, float* out, float* lse, const float* part, const float* part_lse, int64_t B,
           int64_t T, int64_t H, int64_t D) {
  if (B * T * H == 0) return;
  go(LOOM_KERNEL(attention_merge_k),
     Shape{grid_of(blocks_for(B * H * T, kBlock / kWarp)), dim3(kBlock)}, out, lse, part, part_lse,
     B, T, H, D);
}

}  // namespace loom::cuda::attention
