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
