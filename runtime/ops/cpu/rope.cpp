// Rotary position embedding (Su et al. 2021) in the half-split layout that GPT-NeoX and the
// Hugging Face Llama checkpoints use: channel i of a head pairs with channel i + D/2.
#include "ops/cpu/kernels.hpp"

namespace loom::cpu {

namespace {

// Rotates every head of every row by its position's angles; sign = -1 rotates backwards.
//   x'[i]       = x[i] cos - x[i+D/2] (sign sin)
//   x'[i + D/2] = x[i+D/2] cos + x[i] (sign sin)
void rotate(float* x, int64_t ld, int64_t B, int64_t T, int64_t heads, int64_t D, const float* cos,
            const float* sin, int64_t pos0, float sign) {
  const int64_t half = D / 2;
#pragma omp parallel for schedule(static) collapse(2)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      const float* c = cos + (pos0 + t) * half;
      const float* s = sin + (pos0 + t) * half;
      float* row = x + (b * T + t) * ld;
      for (int64_t h = 0; h < heads; ++h) {
        float* lo = row + h * D;
        float* hi = lo + half;
#pragma omp simd
        for (int64_t i = 0; i < half; ++i) {
          const float a = lo[i], z = hi[i], si = sign * s[i];
          lo[i] = a * c[i] - z * si;
          hi[i] = z * c[i] + a * si;
        }
      }
    }
  }
}

}  // namespace

void rope_fwd(float* x, int64_t ld, int64_t B, int64_t T, int64_t heads, int64_t D,
              const float* cos, const float* sin, int64_t pos0) {
  rotate(x, ld, B, T, heads, D, cos, sin, pos0, 1.f);
}

// The rotation is orthogonal, so the gradient goes back through its transpose: the rotation by
// the opposite angle.
void rope_bwd(float* dx, int64_t ld, int64_t B, int64_t T, int64_t heads, int64_t D,
              const float* cos, const float* sin, int64_t pos0) {
  rotate(dx, ld, B, T, heads, D, cos, sin, pos0, -1.f);
}

}  // namespace loom::cpu
