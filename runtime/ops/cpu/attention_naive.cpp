// Reference attention that keeps the full T x T probability matrix. Used by the tests to check
// the tiled kernels and by bench/attention as the baseline; never by training.
#include <cmath>
#include <limits>

#include "ops/cpu/kernels.hpp"

namespace loom::cpu {

// P = softmax_causal(Q K^T / sqrt(D)) per (b, h); out = P V.
void attention_naive_fwd(float* out, float* probs, const float* qkv, int64_t B, int64_t T,
                         int64_t H, int64_t D) {
  const int64_t C = H * D;
  const float scale = 1.f / std::sqrt(static_cast<float>(D));
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      float* P = probs + (b * H + h) * T * T;
      for (int64_t i = 0; i < T; ++i) {
        const float* qi = qkv + (b * T + i) * 3 * C + h * D;
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t j = 0; j <= i; ++j) {
          const float* kj = qkv + (b * T + j) * 3 * C + C + h * D;
          float s = 0.f;
          for (int64_t d = 0; d < D; ++d) s += qi[d] * kj[d];
          P[i * T + j] = s * scale;
          mx = std::max(mx, s * scale);
        }
        float sum = 0.f;
        for (int64_t j = 0; j <= i; ++j) sum += (P[i * T + j] = std::exp(P[i * T + j] - mx));
        for (int64_t j = 0; j < T; ++j) P[i * T + j] = j <= i ? P[i * T + j] / sum : 0.f;
        float* o = out + (b * T + i) * C + h * D;
        for (int64_t d = 0; d < D; ++d) o[d] = 0.f;
        for (int64_t j = 0; j <= i; ++j) {
          const float* vj = qkv + (b * T + j) * 3 * C + 2 * C + h * D;
          for (int64_t d = 0; d < D; ++d) o[d] += P[i * T + j] * vj[d];
        }
      }
    }
  }
}

// dV = P^T dO;  dP = dO V^T;  dS = P * (dP - rowsum(P * dP));  dQ = dS K s;  dK = dS^T Q s
void attention_naive_bwd(float* dqkv, const float* dout, const float* qkv, const float* probs,
                         int64_t B, int64_t T, int64_t H, int64_t D) {
  const int64_t C = H * D;
  const float scale = 1.f / std::sqrt(static_cast<float>(D));
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      const float* P = probs + (b * H + h) * T * T;
      for (int64_t t = 0; t < T; ++t)
        for (int64_t d = 0; d < D; ++d)
          for (int64_t part = 0; part < 3; ++part)
            dqkv[(b * T + t) * 3 * C + part * C + h * D + d] = 0.f;
      for (int64_t i = 0; i < T; ++i) {
        const float* go = dout + (b * T + i) * C + h * D;
        const float* qi = qkv + (b * T + i) * 3 * C + h * D;
        float* dqi = dqkv + (b * T + i) * 3 * C + h * D;
        float rowsum = 0.f;
        for (int64_t j = 0; j <= i; ++j) {
          const float* vj = qkv + (b * T + j) * 3 * C + 2 * C + h * D;
          float dp = 0.f;
          for (int64_t d = 0; d < D; ++d) dp += go[d] * vj[d];
          rowsum += P[i * T + j] * dp;
        }
        for (int64_t j = 0; j <= i; ++j) {
          const float* kj = qkv + (b * T + j) * 3 * C + C + h * D;
          const float* vj = kj + C;
          float* dkj = dqkv + (b * T + j) * 3 * C + C + h * D;
          float* dvj = dkj + C;
          float dp = 0.f;
          for (int64_t d = 0; d < D; ++d) dp += go[d] * vj[d];
          float p = P[i * T + j];
          float ds = p * (dp - rowsum);
          for (int64_t d = 0; d < D; ++d) {
            dvj[d] += p * go[d];
            dqi[d] += ds * kj[d] * scale;
            dkj[d] += ds * qi[d] * scale;
          }
        }
      }
    }
  }
}

}  // namespace loom::cpu
