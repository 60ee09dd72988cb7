// Causal grouped-query attention, the fallback kernel (cuDNN's fused attention is the fast path
// this table does not use yet): one warp per (sequence, head, query position), online softmax
// over the keys at or before it, so no T x T matrix exists; lse[b, h, t] is saved for backward,
// which recomputes the probabilities. Head dimension up to kMaxD.
#include <string>

#include "ops/cuda/common.cuh"
#include "ops/cuda/kernels.hpp"

namespace loom::cuda {

namespace {

constexpr int kMaxD = 256, kPerLane = kMaxD / kWarp, kRowsPerBlock = kBlock / kWarp;

// Where the heads lie: q rows ldq apart (head h at h*D), k and v rows ldkv apart (head g at g*D);
// query head h reads key/value head h / (H / Hkv).
struct Layout {
  const float *q, *k, *v;
  int64_t ldq, ldkv, T, H, Hkv, D;
};

struct Row {  // (b, h, i) of this warp and its key/value head g
  int64_t b, h, i, g;
  __device__ const float* q(const Layout& L) const { return L.q + (b * L.T + i) * L.ldq + h * L.D; }
  __device__ const float* k(const Layout& L, int64_t j) const { return L.k + (b * L.T + j) * L.ldkv + g * L.D; }
  __device__ const float* v(const Layout& L, int64_t j) const { return L.v + (b * L.T + j) * L.ldkv + g * L.D; }
};

__device__ bool row_of(int64_t B, const Layout& L, Row& r) {
  const int64_t w = blockIdx.x * static_cast<int64_t>(kRowsPerBlock) + threadIdx.x / kWarp;
  if (w >= B * L.H * L.T) return false;
  r.i = w % L.T, r.h = (w / L.T) % L.H, r.b = w / (L.T * L.H), r.g = r.h / (L.H / L.Hkv);
  return true;
}

// s_j = q . k_j / sqrt(D) for j <= i; running max m, sum l = sum exp(s_j - m) and
// acc = sum exp(s_j - m) v_j, rescaled by exp(m_old - m_new) when the max grows;
// out = acc / l, lse = m + log l.
__global__ void attention_fwd_k(float* out, float* lse, Layout L, int64_t B) {
  Row r;
  if (!row_of(B, L, r)) return;
  const int64_t D = L.D, T = L.T, H = L.H;
  const int lane = threadIdx.x % kWarp;
  const float scale = rsqrtf(static_cast<float>(D));
  const float* q = r.q(L);
  float acc[kPerLane] = {}, m = -INFINITY, l = 0.f;
  for (int64_t j = 0; j <= r.i; ++j) {
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
  float* o = out + (r.b * T + r.i) * H * D + r.h * D;
  for (int u = 0; u < kPerLane; ++u) {
    const int64_t d = lane + u * kWarp;
    if (d < D) o[d] = acc[u] / l;
  }
  if (lane == 0) lse[(r.b * H + r.h) * T + r.i] = m + logf(l);
}

// With p_j = exp(s_j - lse) and delta = dout . out: ds_j = p_j (dout . v_j - delta);
// dq += ds_j k_j / sqrt(D), dk_j += ds_j q / sqrt(D), dv_j += p_j dout (atomics: every query
// row after j, of every head of the group, adds to k_j and v_j).
__global__ void attention_bwd_k(float* dq_out, float* dk_out, float* dv_out, const float* dout, const float* out,
                                const float* lse, Layout L, int64_t B) {
  Row r;
  if (!row_of(B, L, r)) return;
  const int64_t D = L.D, T = L.T, H = L.H;
  const int lane = threadIdx.x % kWarp;
  const float scale = rsqrtf(static_cast<float>(D));
  const int64_t at = (r.b * T + r.i) * H * D + r.h * D;
  const float *q = r.q(L), *dO = dout + at, *O = out + at;
  float delta = 0.f;
  for (int64_t d = lane; d < D; d += kWarp) delta += dO[d] * O[d];
  delta = warp_sum(delta);
  const float lse_i = lse[(r.b * H + r.h) * T + r.i];
  float dq[kPerLane] = {};
  for (int64_t j = 0; j <= r.i; ++j) {
    const float *k = r.k(L, j), *v = r.v(L, j);
    float qk = 0.f, dv = 0.f;
    for (int64_t d = lane; d < D; d += kWarp) qk += q[d] * k[d], dv += dO[d] * v[d];
    const float p = expf(warp_sum(qk) * scale - lse_i), ds = p * (warp_sum(dv) - delta);
    float* dk = dk_out + (r.b * T + j) * L.ldkv + r.g * D;
    float* dvj = dv_out + (r.b * T + j) * L.ldkv + r.g * D;
    for (int u = 0; u < kPerLane; ++u) {
      const int64_t d = lane + u * kWarp;
      if (d >= D) continue;
      dq[u] += ds * k[d] * scale;
      atomicAdd(&dk[d], ds * q[d] * scale);
      atomicAdd(&dvj[d], p * dO[d]);
    }
  }
  float* dqi = dq_out + (r.b * T + r.i) * L.ldq + r.h * D;
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

void check_head_dim(int64_t D) {
  if (D > kMaxD) throw std::runtime_error("CUDA attention: head dimension " + std::to_string(D) + " > " + std::to_string(kMaxD));
}

}  // namespace

void attention_gqa_fwd(float* out, float* lse, const float* q, const float* k, const float* v, int64_t ldq,
                       int64_t ldkv, int64_t B, int64_t T, int64_t H, int64_t Hkv, int64_t D) {
  check_head_dim(D);
  if (B * T * H == 0) return;
  const Layout L{q, k, v, ldq, ldkv, T, H, Hkv, D};
  attention_fwd_k<<<blocks_for(B * H * T, kRowsPerBlock), kBlock, 0, stream()>>>(out, lse, L, B);
  LOOM_CUDA_LAUNCHED();
  finish_op();
}

void attention_gqa_bwd(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                       const float* v, const float* out, const float* lse, int64_t ldq, int64_t ldkv, int64_t B,
                       int64_t T, int64_t H, int64_t Hkv, int64_t D) {
  check_head_dim(D);
  if (B * T * H == 0) return;
  const Layout L{q, k, v, ldq, ldkv, T, H, Hkv, D};
  const int64_t kv_elems = B * T * Hkv * D;
  zero_heads_k<<<blocks_for(kv_elems, kBlock), kBlock, 0, stream()>>>(dk, B * T, ldkv, Hkv * D);
  zero_heads_k<<<blocks_for(kv_elems, kBlock), kBlock, 0, stream()>>>(dv, B * T, ldkv, Hkv * D);
  attention_bwd_k<<<blocks_for(B * H * T, kRowsPerBlock), kBlock, 0, stream()>>>(dq, dk, dv, dout, out, lse, L, B);
  LOOM_CUDA_LAUNCHED();
  finish_op();
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
