// The MLP activations (GELU with tanh, exact GELU, SwiGLU) on fp32 or bf16 storage. Each kernel is
// written once over its arguments' element types: a bf16 value is widened as it is loaded and a
// result rounded to nearest-even once as it is stored, the arithmetic between is fp32's. So the
// fp32 entries are the <float> forms, and a bf16 form gives the bits of widening its inputs,
// running the fp32 kernel and rounding its output, reading and writing half the bytes.
#include <cmath>

#include "ops/cpu/kernels.hpp"
#include "ops/cpu/storage.hpp"
#include "ops/cpu/vec_math.hpp"

namespace loom::cpu {

namespace {

// gelu(x) = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3)
template <class O, class I>
void gelu_fwd_t(O* out, const I* inp, int64_t n) {
  const float k = std::sqrt(2.f / static_cast<float>(M_PI));
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    float x = load(inp, i);
    put(out, i, 0.5f * x * (1.f + tanh_fast(k * (x + 0.044715f * x * x * x))));
  }
}

// d/dx gelu = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
template <class O, class I, class D>
void gelu_bwd_t(O* dinp, const I* inp, const D* dout, int64_t n) {
  const float k = std::sqrt(2.f / static_cast<float>(M_PI));
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    float x = load(inp, i);
    float th = tanh_fast(k * (x + 0.044715f * x * x * x));
    float grad =
        0.5f * (1.f + th) + 0.5f * x * (1.f - th * th) * k * (1.f + 3.f * 0.044715f * x * x);
    put(dinp, i, grad * load(dout, i));
  }
}

// gelu_erf(x) = 0.5 x (1 + erf(x / sqrt 2)), the exact form (GPT-2's "gelu", BERT)
template <class O, class I>
void gelu_erf_fwd_t(O* out, const I* inp, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float x = load(inp, i);
    put(out, i, 0.5f * x * (1.f + std::erf(x * static_cast<float>(M_SQRT1_2))));
  }
}

// d/dx gelu_erf = 0.5 (1 + erf(x / sqrt 2)) + x phi(x), phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
template <class O, class I, class D>
void gelu_erf_bwd_t(O* dinp, const I* inp, const D* dout, int64_t n) {
  const float inv_sqrt_2pi = static_cast<float>(0.5 * M_2_SQRTPI * M_SQRT1_2);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float x = load(inp, i);
    const float cdf = 0.5f * (1.f + std::erf(x * static_cast<float>(M_SQRT1_2)));
    put(dinp, i, load(dout, i) * (cdf + x * inv_sqrt_2pi * std::exp(-0.5f * x * x)));
  }
}

// out = silu(g) * u, silu(g) = g * sigmoid(g), over rows [g | u] of 2F
template <class O, class I>
void swiglu_fwd_t(O* out, const I* inp, int64_t N, int64_t F) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const I* g = inp + i * 2 * F;
    const I* u = g + F;
    O* o = out + i * F;
    for (int64_t j = 0; j < F; ++j) {
      const float gj = load(g, j);
      put(o, j, gj * sigmoid_fast(gj) * load(u, j));
    }
  }
}

// dg = dout * u * sigmoid(g) (1 + g (1 - sigmoid(g))), du = dout * silu(g)
template <class O, class I, class D>
void swiglu_bwd_t(O* dinp, const I* inp, const D* dout, int64_t N, int64_t F) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const I* g = inp + i * 2 * F;
    const I* u = g + F;
    const D* d = dout + i * F;
    O* dg = dinp + i * 2 * F;
    O* du = dg + F;
    for (int64_t j = 0; j < F; ++j) {
      const float gj = load(g, j), uj = load(u, j), dj = load(d, j);
      float s = sigmoid_fast(gj);
      put(dg, j, dj * uj * s * (1.f + gj * (1.f - s)));
      put(du, j, dj * gj * s);
    }
  }
}

}  // namespace

void gelu_fwd(float* out, const float* inp, int64_t n) { gelu_fwd_t(out, inp, n); }
void gelu_bwd(float* dinp, const float* inp, const float* dout, int64_t n) {
  gelu_bwd_t(dinp, inp, dout, n);
}
void gelu_erf_fwd(float* out, const float* inp, int64_t n) { gelu_erf_fwd_t(out, inp, n); }
void gelu_erf_bwd(float* dinp, const float* inp, const float* dout, int64_t n) {
  gelu_erf_bwd_t(dinp, inp, dout, n);
}
void swiglu_fwd(float* out, const float* inp, int64_t N, int64_t F) {
  swiglu_fwd_t(out, inp, N, F);
}
void swiglu_bwd(float* dinp, const float* inp, const float* dout, int64_t N, int64_t F) {
  swiglu_bwd_t(dinp, inp, dout, N, F);
}

void gelu_fwd(loom_ref out, loom_cref inp, int64_t n) {
  with(out, [&](auto* o) { with(inp, [&](const auto* x) { gelu_fwd_t(o, x, n); }); });
}
void gelu_bwd(loom_ref dinp, loom_cref inp, loom_cref dout, int64_t n) {
  with(dinp, inp, dout, [&](auto* dx, const auto* x, const auto* dy) { gelu_bwd_t(dx, x, dy, n); });
}
void gelu_erf_fwd(loom_ref out, loom_cref inp, int64_t n) {
  with(out, [&](auto* o) { with(inp, [&](const auto* x) { gelu_erf_fwd_t(o, x, n); }); });
}
void gelu_erf_bwd(loom_ref dinp, loom_cref inp, loom_cref dout, int64_t n) {
  with(dinp, inp, dout,
       [&](auto* dx, const auto* x, const auto* dy) { gelu_erf_bwd_t(dx, x, dy, n); });
}
void swiglu_fwd(loom_ref out, loom_cref inp, int64_t N, int64_t F) {
  with(out, [&](auto* o) { with(inp, [&](const auto* x) { swiglu_fwd_t(o, x, N, F); }); });
}
void swiglu_bwd(loom_ref dinp, loom_cref inp, loom_cref dout, int64_t N, int64_t F) {
  with(dinp, inp, dout,
       [&](auto* dx, const auto* x, const auto* dy) { swiglu_bwd_t(dx, x, dy, N, F); });
}

}  // namespace loom::cpu
