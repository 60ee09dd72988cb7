#include <cmath>
#include <vector>

#include "ops/cpu/column_reduce.hpp"
#include "ops/cpu/kernels.hpp"
#include "ops/cpu/vec_math.hpp"

namespace loom::cpu {

// out[b,t,c] = wte[tokens[b,t], c] + wpe[t, c]
void embedding_fwd(float* out, const int32_t* tokens, const float* wte, const float* wpe, int64_t B,
                   int64_t T, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < B * T; ++i) {
    const float* e = wte + static_cast<int64_t>(tokens[i]) * C;
    const float* p = wpe ? wpe + (i % T) * C : nullptr;
    float* o = out + i * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) o[c] = e[c] + (p ? p[c] : 0.f);
  }
}

// dwte[tokens[b,t], c] += dout[b,t,c]; dwpe[t, c] += sum over b of dout[b,t,c].
// Parallel over channel chunks, rows in order: no races and a fixed summation order.
void embedding_bwd(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int64_t B,
                   int64_t T, int64_t C) {
  constexpr int64_t kChunk = 16;
#pragma omp parallel for schedule(static)
  for (int64_t c0 = 0; c0 < C; c0 += kChunk) {
    int64_t c1 = std::min(C, c0 + kChunk);
    for (int64_t i = 0; i < B * T; ++i) {
      float* e = dwte + static_cast<int64_t>(tokens[i]) * C;
      float* p = dwpe ? dwpe + (i % T) * C : nullptr;
      const float* d = dout + i * C;
      for (int64_t c = c0; c < c1; ++c) {
        e[c] += d[c];
        if (p) p[c] += d[c];
      }
    }
  }
}

void bias_add(float* out, const float* bias, int64_t N, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    float* o = out + i * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) o[c] += bias[c];
  }
}

void bias_bwd(float* dbias, const float* dout, int64_t N, int64_t C) {
  column_reduce<1>(N, C, {dbias},
                   [&](int64_t i, int64_t c) { return std::array<float, 1>{dout[i * C + c]}; });
}

// gelu(x) = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3)
void gelu_fwd(float* out, const float* inp, int64_t n) {
  const float k = std::sqrt(2.f / static_cast<float>(M_PI));
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    float x = inp[i];
    out[i] = 0.5f * x * (1.f + tanh_fast(k * (x + 0.044715f * x * x * x)));
  }
}

// d/dx gelu = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
void gelu_bwd(float* dinp, const float* inp, const float* dout, int64_t n) {
  const float k = std::sqrt(2.f / static_cast<float>(M_PI));
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    float x = inp[i];
    float th = tanh_fast(k * (x + 0.044715f * x * x * x));
    float grad =
        0.5f * (1.f + th) + 0.5f * x * (1.f - th * th) * k * (1.f + 3.f * 0.044715f * x * x);
    dinp[i] = grad * dout[i];
  }
}

// gelu_erf(x) = 0.5 x (1 + erf(x / sqrt 2)), the exact form (GPT-2's "gelu", BERT)
void gelu_erf_fwd(float* out, const float* inp, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i)
    out[i] = 0.5f * inp[i] * (1.f + std::erf(inp[i] * static_cast<float>(M_SQRT1_2)));
}

// d/dx gelu_erf = 0.5 (1 + erf(x / sqrt 2)) + x phi(x), phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
void gelu_erf_bwd(float* dinp, const float* inp, const float* dout, int64_t n) {
  const float inv_sqrt_2pi = static_cast<float>(0.5 * M_2_SQRTPI * M_SQRT1_2);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float x = inp[i];
    const float cdf = 0.5f * (1.f + std::erf(x * static_cast<float>(M_SQRT1_2)));
    dinp[i] = dout[i] * (cdf + x * inv_sqrt_2pi * std::exp(-0.5f * x * x));
  }
}

// out = silu(g) * u, silu(g) = g * sigmoid(g)
void swiglu_fwd(float* out, const float* inp, int64_t N, int64_t F) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* g = inp + i * 2 * F;
    const float* u = g + F;
    float* o = out + i * F;
    for (int64_t j = 0; j < F; ++j) o[j] = g[j] * sigmoid_fast(g[j]) * u[j];
  }
}

// dg = dout * u * sigmoid(g) (1 + g (1 - sigmoid(g))), du = dout * silu(g)
void swiglu_bwd(float* dinp, const float* inp, const float* dout, int64_t N, int64_t F) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* g = inp + i * 2 * F;
    const float* u = g + F;
    const float* d = dout + i * F;
    float* dg = dinp + i * 2 * F;
    float* du = dg + F;
    for (int64_t j = 0; j < F; ++j) {
      float s = sigmoid_fast(g[j]);
      dg[j] = d[j] * u[j] * s * (1.f + g[j] * (1.f - s));
      du[j] = d[j] * g[j] * s;
    }
  }
}

void add(float* y, const float* a, const float* b, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

void accumulate(float* y, const float* x, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void scale(float* x, float s, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

// sum x^2 in fixed blocks (double), blocks added in order: the same bits for any thread count.
double sum_squares(const float* x, int64_t n) {
  constexpr int64_t kBlock = 4096;
  int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<double> partial(static_cast<size_t>(blocks), 0.0);
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    double s = 0.0;
    int64_t end = std::min(n, (b + 1) * kBlock);
    for (int64_t i = b * kBlock; i < end; ++i) s += static_cast<double>(x[i]) * x[i];
    partial[b] = s;
  }
  double total = 0.0;
  for (double p : partial) total += p;
  return total;
}

void sum_squares_multi(int64_t count, const float* const* x, const int64_t* n, double* out) {
  for (int64_t t = 0; t < count; ++t) out[t] = sum_squares(x[t], n[t]);
}

}  // namespace loom::cpu
