#include <cmath>
#include <cstring>
#include <vector>

#include "ops/cpu/column_reduce.hpp"
#include "ops/cpu/kernels.hpp"
#include "ops/cpu/storage.hpp"
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

// out[i, c] += bias[c]; dbias[c] += sum_i dout[i, c] (each dtype fp32 or bf16, storage.hpp)
template <class O>
void bias_add_t(O* out, const float* bias, int64_t N, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    O* o = out + i * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) put(o, c, load(o, c) + bias[c]);
  }
}

template <class D>
void bias_bwd_t(float* dbias, const D* dout, int64_t N, int64_t C) {
  column_reduce<1>(N, C, {dbias}, [&](int64_t i, int64_t c) {
    return std::array<float, 1>{load(dout, i * C + c)};
  });
}

void bias_add(float* out, const float* bias, int64_t N, int64_t C) { bias_add_t(out, bias, N, C); }
void bias_bwd(float* dbias, const float* dout, int64_t N, int64_t C) {
  bias_bwd_t(dbias, dout, N, C);
}
void bias_add(loom_ref out, const float* bias, int64_t N, int64_t C) {
  with(out, [&](auto* o) { bias_add_t(o, bias, N, C); });
}
void bias_bwd(float* dbias, loom_cref dout, int64_t N, int64_t C) {
  with(dout, [&](const auto* d) { bias_bwd_t(dbias, d, N, C); });
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

// sum of x_i^2 in double: blocks of 4096 summed on their own (in parallel) and added in block
// order; within a block, element i goes to lane i % 8 of eight independent sums folded pairwise
// at the end, so no add waits on the one before it. The order depends on n alone.
double sum_squares(const float* x, int64_t n) {
  using Lanes = double __attribute__((vector_size(64)));
  constexpr int64_t kBlock = 4096;
  int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<double> partial(static_cast<size_t>(blocks), 0.0);
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t start = b * kBlock, end = std::min(n, start + kBlock);
    Lanes acc = {};
    int64_t i = start;
    for (; i + 8 <= end; i += 8) {
      const Lanes v = {x[i], x[i + 1], x[i + 2], x[i + 3], x[i + 4], x[i + 5], x[i + 6], x[i + 7]};
      acc += v * v;
    }
    double s[8];
    std::memcpy(s, &acc, sizeof s);
    for (; i < end; ++i) s[(i - start) % 8] += static_cast<double>(x[i]) * x[i];
    partial[b] = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
  }
  double total = 0.0;
  for (double p : partial) total += p;
  return total;
}

void sum_squares_multi(int64_t count, const float* const* x, const int64_t* n, double* out) {
  for (int64_t t = 0; t < count; ++t) out[t] = sum_squares(x[t], n[t]);
}

}  // namespace loom::cpu
