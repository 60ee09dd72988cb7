// LayerNorm and RMSNorm over rows of C, forward and backward: one warp per row for the row's
// statistics and the input gradient; the weight and bias gradients are column sums over the
// rows (columns.cuh), with no atomics.
#pragma once

#include "ops/cuda/device.cuh"
#include "ops/cuda/kernels/columns.cuh"

namespace loom::cuda::norms {

constexpr float kEps = 1e-5f;
constexpr int kRowsPerBlock = kBlock / kWarp;

inline Shape rows_shape(int64_t N) {
  return Shape{grid_of(blocks_for(N, kRowsPerBlock)), dim3(kBlock)};
}

// mean = sum(x)/C, var = sum((x - mean)^2)/C, rstd = 1/sqrt(var + eps), out = (x - mean) rstd w + b
__global__ void layernorm_fwd_k(float* out, float* mean, float* rstd, const float* inp,
                                const float* w, const float* b, int64_t N, int64_t C, float eps) {
  const int64_t row = blockIdx.x * static_cast<int64_t>(kRowsPerBlock) + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= N) return;
  const float* x = inp + row * C;
  float s = 0.f;
  for (int64_t c = lane; c < C; c += kWarp) s += x[c];
  const float m = warp_sum(s) / C;
  float v = 0.f;
  for (int64_t c = lane; c < C; c += kWarp) v += (x[c] - m) * (x[c] - m);
  const float r = rsqrtf(warp_sum(v) / C + eps);
  for (int64_t c = lane; c < C; c += kWarp)
    out[row * C + c] = (x[c] - m) * r * w[c] + (b ? b[c] : 0.f);
  if (lane == 0) mean[row] = m, rstd[row] = r;
}

// xhat = (x - mean) rstd, g = dout w: dx = rstd (g - mean(g) - xhat mean(g xhat))
__global__ void layernorm_dinp_k(float* dinp, const float* dout, const float* inp, const float* w,
                                 const float* mean, const float* rstd, int64_t N, int64_t C) {
  const int64_t row = blockIdx.x * static_cast<int64_t>(kRowsPerBlock) + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= N) return;
  const float *x = inp + row * C, *d = dout + row * C;
  const float m = mean[row], r = rstd[row];
  float g_sum = 0.f, gx_sum = 0.f;
  for (int64_t c = lane; c < C; c += kWarp) {
    const float xhat = (x[c] - m) * r, g = d[c] * w[c];
    g_sum += g, gx_sum += g * xhat;
  }
  const float g_mean = warp_sum(g_sum) / C, gx_mean = warp_sum(gx_sum) / C;
  for (int64_t c = lane; c < C; c += kWarp) {
    const float xhat = (x[c] - m) * r;
    dinp[row * C + c] = r * (d[c] * w[c] - g_mean - xhat * gx_mean);
  }
}

// rstd = 1/sqrt(mean(x^2) + eps), out = x rstd w
__global__ void rmsnorm_fwd_k(float* out, float* rstd, const float* inp, const float* w, int64_t N,
                              int64_t C, float eps) {
  const int64_t row = blockIdx.x * static_cast<int64_t>(kRowsPerBlock) + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= N) return;
  const float* x = inp + row * C;
  float ss = 0.f;
  for (int64_t c = lane; c < C; c += kWarp) ss += x[c] * x[c];
  const float r = rsqrtf(warp_sum(ss) / C + eps);
  for (int64_t c = lane; c < C; c += kWarp) out[row * C + c] = x[c] * r * w[c];
  if (lane == 0) rstd[row] = r;
}

// xhat = x rstd, g = dout w: dx = rstd (g - xhat mean(g xhat))
__global__ void rmsnorm_dinp_k(float* dinp, const float* dout, const float* inp, const float* w,
                               const float* rstd, int64_t N, int64_t C) {
  const int64_t row = blockIdx.x * static_cast<int64_t>(kRowsPerBlock) + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= N) return;
  const float *x = inp + row * C, *d = dout + row * C;
  const float r = rstd[row];
  float gx = 0.f;
  for (int64_t c = lane; c < C; c += kWarp) gx += d[c] * w[c] * x[c] * r;
  const float gx_mean = warp_sum(gx) / C;
  for (int64_t c = lane; c < C; c += kWarp)
    dinp[row * C + c] = r * (d[c] * w[c] - x[c] * r * gx_mean);
}

// ---- launch sequences ----

template <class Go>
void layernorm_fwd(Go& go, float* out, float* mean, float* rstd, const float* inp, const float* w,
                   const float* b, int64_t N, int64_t C, float eps) {
  if (N > 0) go(LOOM_KERNEL(layernorm_fwd_k), rows_shape(N), out, mean, rstd, inp, w, b, N, C, eps);
}

template <class Go>
void layernorm_bwd(Go& go, float* dinp, float* dw, float* db, const float* dout, const float* inp,
                   const float* w, const float* mean, const float* rstd, int64_t N, int64_t C) {
  if (N <= 0) return;
  go(LOOM_KERNEL(layernorm_dinp_k), rows_shape(N), dinp, dout, inp, w, mean, rstd, N, C);
  columns::add_sums(go, dw, columns::Centered{dout, inp, mean, rstd, C}, N, C);
  if (db) columns::add_sums(go, db, columns::Plain{dout, C}, N, C);
}

template <class Go>
void rmsnorm_fwd(Go& go, float* out, float* rstd, const float* inp, const float* w, int64_t N,
                 int64_t C, float eps) {
  if (N > 0) go(LOOM_KERNEL(rmsnorm_fwd_k), rows_shape(N), out, rstd, inp, w, N, C, eps);
}

template <class Go>
void rmsnorm_bwd(Go& go, float* dinp, float* dw, const float* dout, const float* inp,
                 const float* w, const float* rstd, int64_t N, int64_t C) {
  if (N <= 0) return;
  go(LOOM_KERNEL(rmsnorm_dinp_k), rows_shape(N), dinp, dout, inp, w, rstd, N, C);
  columns::add_sums(go, dw, columns::Scaled{dout, inp, rstd, C}, N, C);
}

}  // namespace loom::cuda::norms
