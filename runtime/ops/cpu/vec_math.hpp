// exp and tanh written so that GCC vectorises loops calling them (glibc's expf/tanhf are scalar
// calls unless -ffast-math, which Loom does not use). Relative error below 2e-7 over the range
// that matters; tests compare kernels against finite differences and the naive attention.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace loom::cpu {

// exp(x) = 2^k exp(r), k = round(x / ln 2), r = x - k ln 2 in [-ln2/2, ln2/2] (Cody-Waite split
// of ln 2 keeps r exact); exp(r) by its degree-6 Taylor polynomial; 2^k assembled in the
// exponent bits. Below -87.3 (fp32 underflow) the result is 0, above 88.7 it saturates, and a
// NaN stays NaN (so a diverging run is still caught by the non-finite checks).
inline float exp_fast(float x) {
  float xc = x > 88.7f ? 88.7f : x;  // comparisons, not fmin/fmax: they compile to blends
  xc = xc < -87.3f ? -87.3f : xc;    // (a NaN passes through both and poisons p)
  const float k = std::floor(xc * 1.44269504f + 0.5f);
  const float r = (xc - k * 0.693359375f) - k * -2.12194440e-4f;
  float p = 1.f / 720.f;
  p = p * r + 1.f / 120.f;
  p = p * r + 1.f / 24.f;
  p = p * r + 1.f / 6.f;
  p = p * r + 0.5f;
  p = p * r + 1.f;
  p = p * r + 1.f;
  const float scale = std::bit_cast<float>((static_cast<int32_t>(k) + 127) << 23);
  return x < -87.3f ? 0.f : p * scale;
}

// tanh(u) = 1 - 2 / (exp(2u) + 1): exact limits at +-inf, absolute error ~1e-7 near 0.
inline float tanh_fast(float u) { return 1.f - 2.f / (exp_fast(2.f * u) + 1.f); }

inline float sigmoid_fast(float x) { return 1.f / (1.f + exp_fast(-x)); }

}  // namespace loom::cpu
