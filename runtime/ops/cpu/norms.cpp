// The row statistics are sums over C that the compiler may only vectorise when told the order
// is free: `omp simd reduction` sums in vector lanes, then folds the lanes. The order is fixed
// by the build (the vector width), so a row's result does not depend on threads or layout, and
// it differs from a serial sum only by rounding.
#include <cmath>

#include "ops/cpu/column_reduce.hpp"
#include "ops/cpu/kernels.hpp"

namespace loom::cpu {

constexpr float kNormEps = 1e-5f;

// mean = sum(x)/C, var = sum((x-mean)^2)/C, rstd = 1/sqrt(var + eps)
// out = (x - mean) * rstd * w + b
void layernorm_fwd_eps(float* out, float* mean, float* rstd, const float* inp, const float* w,
                       const float* b, int64_t N, int64_t C, float eps) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* x = inp + i * C;
    float s = 0.f;
#pragma omp simd reduction(+ : s)
    for (int64_t c = 0; c < C; ++c) s += x[c];
    float m = s / C;
    float v = 0.f;
#pragma omp simd reduction(+ : v)
    for (int64_t c = 0; c < C; ++c) v += (x[c] - m) * (x[c] - m);
    float r = 1.f / std::sqrt(v / C + eps);
    float* o = out + i * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) o[c] = (x[c] - m) * r * w[c] + (b ? b[c] : 0.f);
    mean[i] = m;
    rstd[i] = r;
  }
}

void layernorm_fwd(float* out, float* mean, float* rstd, const float* inp, const float* w,
                   const float* b, int64_t N, int64_t C) {
  layernorm_fwd_eps(out, mean, rstd, inp, w, b, N, C, kNormEps);
}

// xhat = (x - mean) * rstd, g = dout * w
// dinp = rstd * (g - mean(g) - xhat * mean(g * xhat)); dw += dout * xhat; db += dout (db may be null)
void layernorm_bwd(float* dinp, float* dw, float* db, const float* dout, const float* inp,
                   const float* w, const float* mean, const float* rstd, int64_t N, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* x = inp + i * C;
    const float* d = dout + i * C;
    float m = mean[i], r = rstd[i];
    float g_mean = 0.f, gx_mean = 0.f;
#pragma omp simd reduction(+ : g_mean, gx_mean)
    for (int64_t c = 0; c < C; ++c) {
      float g = d[c] * w[c];
      g_mean += g;
      gx_mean += g * (x[c] - m) * r;
    }
    g_mean /= C;
    gx_mean /= C;
    float* dx = dinp + i * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) {
      float xhat = (x[c] - m) * r;
      dx[c] = r * (d[c] * w[c] - g_mean - xhat * gx_mean);
    }
  }
  column_reduce<2>(N, C, {dw, db}, [&](int64_t i, int64_t c) {
    float d = dout[i * C + c];
    return std::array<float, 2>{d * (inp[i * C + c] - mean[i]) * rstd[i], d};
  });
}

// rstd = 1/sqrt(mean(x^2) + eps), out = x * rstd * w
void rmsnorm_fwd_eps(float* out, float* rstd, const float* inp, const float* w, int64_t N, int64_t C,
                     float eps) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* x = inp + i * C;
    float ss = 0.f;
#pragma omp simd reduction(+ : ss)
    for (int64_t c = 0; c < C; ++c) ss += x[c] * x[c];
    float r = 1.f / std::sqrt(ss / C + eps);
    float* o = out + i * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) o[c] = x[c] * r * w[c];
    rstd[i] = r;
  }
}

void rmsnorm_fwd(float* out, float* rstd, const float* inp, const float* w, int64_t N, int64_t C) {
  rmsnorm_fwd_eps(out, rstd, inp, w, N, C, kNormEps);
}

// xhat = x * rstd, g = dout * w
// dinp = rstd * (g - xhat * mean(g * xhat)); dw += dout * xhat
void rmsnorm_bwd(float* dinp, float* dw, const float* dout, const float* inp, const float* w,
                 const float* rstd, int64_t N, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* x = inp + i * C;
    const float* d = dout + i * C;
    float r = rstd[i];
    float gx_mean = 0.f;
#pragma omp simd reduction(+ : gx_mean)
    for (int64_t c = 0; c < C; ++c) gx_mean += d[c] * w[c] * x[c] * r;
    gx_mean /= C;
    float* dx = dinp + i * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) dx[c] = r * (d[c] * w[c] - x[c] * r * gx_mean);
  }
  column_reduce<1>(N, C, {dw}, [&](int64_t i, int64_t c) {
    return std::array<float, 1>{dout[i * C + c] * inp[i * C + c] * rstd[i]};
  });
}

}  // namespace loom::cpu
