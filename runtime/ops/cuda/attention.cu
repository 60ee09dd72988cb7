// Causal grouped-query attention, the fallback kernel (cuDNN's fused attention is the fast path
// this table does not use yet): one warp per (sequence, head, query position), online softmax
// over the keys at or before it, so no Tq x Tk matrix exists; lse[b, h, t] is saved for backward,
// which recomputes the probabilities. The block form (ABI 1.5) takes Tq queries over a block of
// Tk keys at given positions (context parallelism), and attention_merge folds blocks together;
// the plain form is the block form with Tq = Tk = T at positions 0, 1, 2, ... Head dimension up
// to kMaxD.
#include <string>

#include "ops/cuda/common.cuh"
#include "ops/cuda/kernels.hpp"

namespace loom::cuda {

namespace {

constexpr int kMaxD = 256, kPerLane = kMaxD / kWarp, kRowsPerBlock = kBlock / kWarp;

// Where the heads lie: q rows ldq apart (head h at h*D, Tq rows per sequence), k and v rows ldkv
// apart (head g at g*D, Tk rows per sequence); query head h reads key/value head h / (H / Hkv).
// qpos[i] and kpos[j] (device-accessible, ascending, shared by every sequence) place query i and
// key j; null means 0, 1, 2, ...
struct Layout {
  const float *q, *k, *v;
  int64_t ldq, ldkv, Tq, Tk, H, Hkv, D;
  const int64_t *qpos, *kpos;
};

struct Row {  // (b, h, i) of this warp and its key/value head g
  int64_t b, h, i, g;
  __device__ const float* q(const Layout& L) const { return L.q + (b * L.Tq + i) * L.ldq + h * L.D; }
  __device__ const float* k(const Layout& L, int64_t j) const { return L.k + (b * L.Tk + j) * L.ldkv + g * L.D; }
  __device__ const float* v(const Layout& L, int64_t j) const { return L.v + (b * L.Tk + j) * L.ldkv + g * L.D; }
  __device__ int64_t out(const Layout& L) const { return (b * L.Tq + i) * L.H * L.D + h * L.D; }  // out, dout
  __device__ int64_t lse(const Layout& L) const { return (b * L.H + h) * L.Tq + i; }
};

__device__ bool row_of(int64_t B, const Layout& L, Row& r) {
  const int64_t w = blockIdx.x * static_cast<int64_t>(kRowsPerBlock) + threadIdx.x / kWarp;
  if (w >= B * L.H * L.Tq) return false;
  r.i = w % L.Tq, r.h = (w / L.Tq) % L.H, r.b = w / (L.Tq * L.H), r.g = r.h / (L.H / L.Hkv);
  return true;
}

// n_i = #{j : kpos[j] <= qpos[i]}, the keys query i sees (causal): positions ascend, so they are
// the first n_i, found by binary search (every lane of the warp runs the same search).
__device__ int64_t visible_keys(const Layout& L, int64_t i) {
  const int64_t p = L.qpos ? L.qpos[i] : i;
  if (!L.kpos) return p < 0 ? 0 : (p + 1 < L.Tk ? p + 1 : L.Tk);
  int64_t lo = 0, hi = L.Tk;  // the first j with kpos[j] > p
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (L.kpos[mid] <= p) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

// s_j = q . k_j / sqrt(D) for j < n_i; running max m, sum l = sum exp(s_j - m) and
// acc = sum exp(s_j - m) v_j, rescaled by exp(m_old - m_new) when the max grows;
// out = acc / l, lse = m + log l. No visible key (l = 0): out = 0, lse = -inf.
__global__ void attention_fwd_k(float* out, float* lse, Layout L, int64_t B) {
  Row r;
  if (!row_of(B, L, r)) return;
  const int64_t D = L.D, n = visible_keys(L, r.i);
  const int lane = threadIdx.x % kWarp;
  const float scale = rsqrtf(static_cast<float>(D));
  const float* q = r.q(L);
  float acc[kPerLane] = {}, m = -INFINITY, l = 0.f;
  for (int64_t j = 0; j < n; ++j) {
    const float* k = r.k(L, j);
    float dot = 0.f;
    for (int64_t d = lane; d < D; d += kWarp) dot += q[d] * k[d];
    const float s = warp_sum(dot) * scale, m_new = fmaxf(m, s), corr = expf(m - m_new), p = expf(s - m_new);
    l = l * corr + p;
    const float* v = r.v(L, j);
    for (int u = 0; u < kPerLane; ++u) {
      const int64_t d = lane + u * kWarp;
      if (d < D) acc[u] = acc[u] * corr + p * v[d];
    }
    m = m_new;
  }
  float* o = out + r.out(L);
  for (int u = 0; u < kPerLane; ++u) {
    const int64_t d = lane + u * kWarp;
    if (d < D) o[d] = l > 0.f ? acc[u] / l : 0.f;
  }
  if (lane == 0) lse[r.lse(L)] = l > 0.f ? m + logf(l) : -INFINITY;
}

// For j < n_i, with p_j = exp(s_j - lse) and delta = dout . out (out and lse the whole
// attention's, over every key block): ds_j = p_j (dout . v_j - delta);
// dq += ds_j k_j / sqrt(D), dk_j += ds_j q / sqrt(D), dv_j += p_j dout (atomics: every query
// row that sees j, of every head of the group, adds to k_j and v_j).
__global__ void attention_bwd_k(float* dq_out, float* dk_out, float* dv_out, const float* dout, const float* out,
                                const float* lse, Layout L, int64_t B) {
  Row r;
  if (!row_of(B, L, r)) return;
  const int64_t D = L.D, n = visible_keys(L, r.i);
  const int lane = threadIdx.x % kWarp;
  const float scale = rsqrtf(static_cast<float>(D));
  const int64_t at = r.out(L);
  const float *q = r.q(L), *dO = dout + at, *O = out + at;
  float delta = 0.f;
  for (int64_t d = lane; d < D; d += kWarp) delta += dO[d] * O[d];
  delta = warp_sum(delta);
  const float lse_i = lse[r.lse(L)];
  float dq[kPerLane] = {};
  for (int64_t j = 0; j < n; ++j) {
    const float *k = r.k(L, j), *v = r.v(L, j);
    float qk = 0.f, dv = 0.f;
    for (int64_t d = lane; d < D; d += kWarp) qk += q[d] * k[d], dv += dO[d] * v[d];
    const float p = expf(warp_sum(qk) * scale - lse_i), ds = p * (warp_sum(dv) - delta);
    float* dk = dk_out + (r.b * L.Tk + j) * L.ldkv + r.g * D;
    float* dvj = dv_out + (r.b * L.Tk + j) * L.ldkv + r.g * D;
    for (int u = 0; u < kPerLane; ++u) {
      const int64_t d = lane + u * kWarp;
      if (d >= D) continue;
      dq[u] += ds * k[d] * scale;
      atomicAdd(&dk[d], ds * q[d] * scale);
      atomicAdd(&dvj[d], p * dO[d]);
    }
  }
  float* dqi = dq_out + (r.b * L.Tq + r.i) * L.ldq + r.h * D;
  for (int u = 0; u < kPerLane; ++u) {
    const int64_t d = lane + u * kWarp;
    if (d < D) dqi[d] = dq[u];
  }
}

// dk and dv accumulate: zero this layout's key/value heads first (row by row: rows are strided).
__global__ void zero_heads_k(float* x, int64_t rows, int64_t ld, int64_t width) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < rows * width) x[(i / width) * ld + i % width] = 0.f;
}

// One warp per (b, h, t): with a = (out, lse) and b = (part, part_lse),
//   lse' = log(exp(lse_a) + exp(lse_b)) = mx + log(exp(lse_a - mx) + exp(lse_b - mx)), mx = max,
//   out' = out_a exp(lse_a - lse') + out_b exp(lse_b - lse').
// lse_b = -inf: an empty part, skipped; lse_a = -inf: out' = out_b (its weight is 0, not NaN).
__global__ void attention_merge_k(float* out, float* lse, const float* part, const float* part_lse, int64_t B,
                                  int64_t T, int64_t H, int64_t D) {
  const int64_t w = blockIdx.x * static_cast<int64_t>(kRowsPerBlock) + threadIdx.x / kWarp;
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

void check_head_dim(int64_t D) {
  if (D > kMaxD) throw std::runtime_error("CUDA attention: head dimension " + std::to_string(D) + " > " + std::to_string(kMaxD));
}

}  // namespace

void attention_block_fwd(float* out, float* lse, const float* q, const float* k, const float* v, int64_t ldq,
                         int64_t ldkv, int64_t B, int64_t Tq, int64_t Tk, int64_t H, int64_t Hkv, int64_t D,
                         const int64_t* qpos, const int64_t* kpos) {
  check_head_dim(D);
  if (B * Tq * H == 0) return;
  const Layout L{q, k, v, ldq, ldkv, Tq, Tk, H, Hkv, D, qpos, kpos};
  attention_fwd_k<<<blocks_for(B * H * Tq, kRowsPerBlock), kBlock, 0, stream()>>>(out, lse, L, B);
  LOOM_CUDA_LAUNCHED();
  finish_op();
}

void attention_block_bwd(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                         const float* v, const float* out, const float* lse, int64_t ldq, int64_t ldkv, int64_t B,
                         int64_t Tq, int64_t Tk, int64_t H, int64_t Hkv, int64_t D, const int64_t* qpos,
                         const int64_t* kpos) {
  check_head_dim(D);
  const Layout L{q, k, v, ldq, ldkv, Tq, Tk, H, Hkv, D, qpos, kpos};
  const int64_t kv_elems = B * Tk * Hkv * D;
  if (kv_elems > 0) {  // overwritten, even where no query sees the key
    zero_heads_k<<<blocks_for(kv_elems, kBlock), kBlock, 0, stream()>>>(dk, B * Tk, ldkv, Hkv * D);
    zero_heads_k<<<blocks_for(kv_elems, kBlock), kBlock, 0, stream()>>>(dv, B * Tk, ldkv, Hkv * D);
    LOOM_CUDA_LAUNCHED();
  }
  if (B * Tq * H > 0) {
    attention_bwd_k<<<blocks_for(B * H * Tq, kRowsPerBlock), kBlock, 0, stream()>>>(dq, dk, dv, dout, out, lse, L,
                                                                                     B);
    LOOM_CUDA_LAUNCHED();
  }
  finish_op();
}

void attention_merge(float* out, float* lse, const float* part, const float* part_lse, int64_t B, int64_t T,
                     int64_t H, int64_t D) {
  if (B * T * H == 0) return;
  attention_merge_k<<<blocks_for(B * H * T, kRowsPerBlock), kBlock, 0, stream()>>>(out, lse, part, part_lse, B, T,
                                                                                    H, D);
  LOOM_CUDA_LAUNCHED();
  finish_op();
}

void attention_gqa_fwd(float* out, float* lse, const float* q, const float* k, const float* v, int64_t ldq,
                       int64_t ldkv, int64_t B, int64_t T, int64_t H, int64_t Hkv, int64_t D) {
  attention_block_fwd(out, lse, q, k, v, ldq, ldkv, B, T, T, H, Hkv, D, nullptr, nullptr);
}

void attention_gqa_bwd(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                       const float* v, const float* out, const float* lse, int64_t ldq, int64_t ldkv, int64_t B,
                       int64_t T, int64_t H, int64_t Hkv, int64_t D) {
  attention_block_bwd(dq, dk, dv, dout, q, k, v, out, lse, ldq, ldkv, B, T, T, H, Hkv, D, nullptr, nullptr);
}

// The multi-head layout: rows of [q (H*D) | k (H*D) | v (H*D)].
void attention_fwd(float* out, float* lse, const float* qkv, int64_t B, int64_t T, int64_t H, int64_t D) {
  const int64_t C = H * D;
  attention_gqa_fwd(out, lse, qkv, qkv + C, qkv + 2 * C, 3 * C, 3 * C, B, T, H, H, D);
}

void attention_bwd(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse, int64_t B,
                   int64_t T, int64_t H, int64_t D) {
  const int64_t C = H * D;
  attention_gqa_bwd(dqkv, dqkv + C, dqkv + 2 * C, dout, qkv, qkv + C, qkv + 2 * C, out, lse, 3 * C, 3 * C, B, T,
                    H, H, D);
}

}  // namespace loom::cuda
