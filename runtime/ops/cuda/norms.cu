// LayerNorm and RMSNorm over rows of C, forward and backward: one warp per row. Parameter
// gradients accumulate with atomics (rows in any order), input gradients are written.
#include "ops/cuda/common.cuh"
#include "ops/cuda/kernels.hpp"

namespace loom::cuda {

namespace {

constexpr float kNormEps = 1e-5f;
constexpr int kRowsPerBlock = kBlock / kWarp;

// mean = sum(x)/C, var = sum((x - mean)^2)/C, rstd = 1/sqrt(var + eps), out = (x - mean) rstd w + b
__global__ void layernorm_fwd_k(float* out, float* mean, float* rstd, const float* inp, const float* w,
                                const float* b, int64_t N, int64_t C, float eps) {
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
  for (int64_t c = lane; c < C; c += kWarp) out[row * C + c] = (x[c] - m) * r * w[c] + (b ? b[c] : 0.f);
  if (lane == 0) mean[row] = m, rstd[row] = r;
}

// xhat = (x - mean) rstd, g = dout w: dx = rstd (g - mean(g) - xhat mean(g xhat));
// dw += dout xhat, db += dout
__global__ void layernorm_bwd_k(float* dinp, float* dw, float* db, const float* dout, const float* inp,
                                const float* w, const float* mean, const float* rstd, int64_t N, int64_t C) {
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
    const float xhat = (x[c] - m) * r, g = d[c] * w[c];
    dinp[row * C + c] = r * (g - g_mean - xhat * gx_mean);
    atomicAdd(&dw[c], d[c] * xhat);
    if (db) atomicAdd(&db[c], d[c]);
  }
}

// rstd = 1/sqrt(mean(x^2) + eps), out = x rstd w
__global__ void rmsnorm_fwd_k(float* out, float* rstd, const float* inp, const float* w, int64_t N, int64_t C,
                              float eps) {
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

// xhat = x rstd, g = dout w: dx = rstd (g - xhat mean(g xhat)); dw += dout xhat
__global__ void rmsnorm_bwd_k(float* dinp, float* dw, const float* dout, const float* inp, const float* w,
                              const float* rstd, int64_t N, int64_t C) {
  const int64_t row = blockIdx.x * static_cast<int64_t>(kRowsPerBlock) + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= N) return;
  const float *x = inp + row * C, *d = dout + row * C;
  const float r = rstd[row];
  float gx = 0.f;
  for (int64_t c = lane; c < C; c += kWarp) gx += d[c] * w[c] * x[c] * r;
  const float gx_mean = warp_sum(gx) / C;
  for (int64_t c = lane; c < C; c += kWarp) {
    const float xhat = x[c] * r;
    dinp[row * C + c] = r * (d[c] * w[c] - xhat * gx_mean);
    atomicAdd(&dw[c], d[c] * xhat);
  }
}

unsigned row_blocks(int64_t N) { return static_cast<unsigned>((N + kRowsPerBlock - 1) / kRowsPerBlock); }

}  // namespace

void layernorm_fwd_eps(float* out, float* mean, float* rstd, const float* inp, const float* w, const float* b,
                       int64_t N, int64_t C, float eps) {
  if (N == 0) return;
  layernorm_fwd_k<<<row_blocks(N), kBlock, 0, stream()>>>(out, mean, rstd, inp, w, b, N, C, eps);
  LOOM_CUDA_LAUNCHED();
  finish_op();
}

void layernorm_fwd(float* out, float* mean, float* rstd, const float* inp, const float* w, const float* b,
                   int64_t N, int64_t C) {
  layernorm_fwd_eps(out, mean, rstd, inp, w, b, N, C, kNormEps);
}

void layernorm_bwd(float* dinp, float* dw, float* db, const float* dout, const float* inp, const float* w,
                   const float* mean, const float* rstd, int64_t N, int64_t C) {
  if (N == 0) return;
  layernorm_bwd_k<<<row_blocks(N), kBlock, 0, stream()>>>(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
  LOOM_CUDA_LAUNCHED();
  finish_op();
}

void rmsnorm_fwd_eps(float* out, float* rstd, const float* inp, const float* w, int64_t N, int64_t C, float eps) {
  if (N == 0) return;
  rmsnorm_fwd_k<<<row_blocks(N), kBlock, 0, stream()>>>(out, rstd, inp, w, N, C, eps);
  LOOM_CUDA_LAUNCHED();
  finish_op();
}

void rmsnorm_fwd(float* out, float* rstd, const float* inp, const float* w, int64_t N, int64_t C) {
  rmsnorm_fwd_eps(out, rstd, inp, w, N, C, kNormEps);
}

void rmsnorm_bwd(float* dinp, float* dw, const float* dout, const float* inp, const float* w, const float* rstd,
                 int64_t N, int64_t C) {
  if (N == 0) return;
  rmsnorm_bwd_k<<<row_blocks(N), kBlock, 0, stream()>>>(dinp, dw, dout, inp, w, rstd, N, C);
  LOOM_CUDA_LAUNCHED();
  finish_op();
}

}  // namespace loom::cuda
