// Causal multi-head attention, the fallback kernel (cuDNN's fused attention is the fast path
// this table does not use yet): one warp per (sequence, head, query position), online softmax
// over the keys at or before it, so no T x T matrix exists; lse[b, h, t] is saved for backward,
// which recomputes the probabilities. Head dimension up to kMaxD.
#include <string>

#include "ops/cuda/common.cuh"
#include "ops/cuda/kernels.hpp"

namespace loom::cuda {

namespace {

constexpr int kMaxD = 256, kPerLane = kMaxD / kWarp, kRowsPerBlock = kBlock / kWarp;

struct Row {  // (b, h, i) of this warp, and where its q, k, v columns start
  int64_t b, h, i, C;
  __device__ const float* q(const float* qkv) const { return qkv + (b * T + i) * 3 * C + h * D; }
  __device__ const float* k(const float* qkv, int64_t j) const { return qkv + (b * T + j) * 3 * C + C + h * D; }
  __device__ const float* v(const float* qkv, int64_t j) const { return qkv + (b * T + j) * 3 * C + 2 * C + h * D; }
  int64_t T, D;
};

__device__ bool row_of(int64_t B, int64_t T, int64_t H, int64_t D, Row& r) {
  const int64_t w = blockIdx.x * static_cast<int64_t>(kRowsPerBlock) + threadIdx.x / kWarp;
  if (w >= B * H * T) return false;
  r.i = w % T, r.h = (w / T) % H, r.b = w / (T * H), r.C = H * D, r.T = T, r.D = D;
  return true;
}

// s_j = q . k_j / sqrt(D) for j <= i; running max m, sum l = sum exp(s_j - m) and
// acc = sum exp(s_j - m) v_j, rescaled by exp(m_old - m_new) when the max grows;
// out = acc / l, lse = m + log l.
__global__ void attention_fwd_k(float* out, float* lse, const float* qkv, int64_t B, int64_t T, int64_t H,
                                int64_t D) {
  Row r;
  if (!row_of(B, T, H, D, r)) return;
  const int lane = threadIdx.x % kWarp;
  const float scale = rsqrtf(static_cast<float>(D));
  const float* q = r.q(qkv);
  float acc[kPerLane] = {}, m = -INFINITY, l = 0.f;
  for (int64_t j = 0; j <= r.i; ++j) {
    const float* k = r.k(qkv, j);
    float dot = 0.f;
    for (int64_t d = lane; d < D; d += kWarp) dot += q[d] * k[d];
    const float s = warp_sum(dot) * scale, m_new = fmaxf(m, s), corr = expf(m - m_new), p = expf(s - m_new);
    l = l * corr + p;
    const float* v = r.v(qkv, j);
    for (int u = 0; u < kPerLane; ++u) {
      const int64_t d = lane + u * kWarp;
      if (d < D) acc[u] = acc[u] * corr + p * v[d];
    }
    m = m_new;
  }
  float* o = out + (r.b * T + r.i) * r.C + r.h * D;
  for (int u = 0; u < kPerLane; ++u) {
    const int64_t d = lane + u * kWarp;
    if (d < D) o[d] = acc[u] / l;
  }
  if (lane == 0) lse[(r.b * H + r.h) * T + r.i] = m + logf(l);
}

// With p_j = exp(s_j - lse) and delta = dout . out: ds_j = p_j (dout . v_j - delta);
// dq += ds_j k_j / sqrt(D), dk_j += ds_j q / sqrt(D), dv_j += p_j dout (atomics: every query
// row after j adds to k_j and v_j).
__global__ void attention_bwd_k(float* dqkv, const float* dout, const float* qkv, const float* out,
                                const float* lse, int64_t B, int64_t T, int64_t H, int64_t D) {
  Row r;
  if (!row_of(B, T, H, D, r)) return;
  const int lane = threadIdx.x % kWarp;
  const float scale = rsqrtf(static_cast<float>(D));
  const int64_t at = (r.b * T + r.i) * r.C + r.h * D;
  const float *q = r.q(qkv), *dO = dout + at, *O = out + at;
  float delta = 0.f;
  for (int64_t d = lane; d < D; d += kWarp) delta += dO[d] * O[d];
  delta = warp_sum(delta);
  const float L = lse[(r.b * H + r.h) * T + r.i];
  float dq[kPerLane] = {};
  for (int64_t j = 0; j <= r.i; ++j) {
    const float *k = r.k(qkv, j), *v = r.v(qkv, j);
    float qk = 0.f, dv = 0.f;
    for (int64_t d = lane; d < D; d += kWarp) qk += q[d] * k[d], dv += dO[d] * v[d];
    const float p = expf(warp_sum(qk) * scale - L), ds = p * (warp_sum(dv) - delta);
    float* dk = dqkv + (r.b * T + j) * 3 * r.C + r.C + r.h * D;
    float* dvj = dk + r.C;
    for (int u = 0; u < kPerLane; ++u) {
      const int64_t d = lane + u * kWarp;
      if (d >= D) continue;
      dq[u] += ds * k[d] * scale;
      atomicAdd(&dk[d], ds * q[d] * scale);
      atomicAdd(&dvj[d], p * dO[d]);
    }
  }
  float* dqi = dqkv + (r.b * T + r.i) * 3 * r.C + r.h * D;
  for (int u = 0; u < kPerLane; ++u) {
    const int64_t d = lane + u * kWarp;
    if (d < D) dqi[d] = dq[u];
  }
}

void check_head_dim(int64_t D) {
  if (D > kMaxD) throw std::runtime_error("CUDA attention: head dimension " + std::to_string(D) + " > " + std::to_string(kMaxD));
}

}  // namespace

void attention_fwd(float* out, float* lse, const float* qkv, int64_t B, int64_t T, int64_t H, int64_t D) {
  check_head_dim(D);
  if (B * T * H == 0) return;
  attention_fwd_k<<<blocks_for(B * H * T, kRowsPerBlock), kBlock, 0, stream()>>>(out, lse, qkv, B, T, H, D);
  LOOM_CUDA_LAUNCHED();
  finish_op();
}

void attention_bwd(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse, int64_t B,
                   int64_t T, int64_t H, int64_t D) {
  check_head_dim(D);
  if (B * T * H == 0) return;
  LOOM_CUDA_CHECK(cudaMemsetAsync(dqkv, 0, B * T * 3 * H * D * sizeof(float), stream()));
  attention_bwd_k<<<blocks_for(B * H * T, kRowsPerBlock), kBlock, 0, stream()>>>(dqkv, dout, qkv, out, lse, B, T, H, D);
  LOOM_CUDA_LAUNCHED();
  finish_op();
}

}  // namespace loom::cuda
