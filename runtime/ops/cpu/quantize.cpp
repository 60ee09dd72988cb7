#include <cmath>

#include "ops/cpu/kernels.hpp"
#include "ops/formats.hpp"

namespace loom::cpu {

// x[i] = cast(x[i] * scale) / scale through the narrow format (ops/formats.hpp), in place.
// amax = max |x[i]| of the input (NaN when any is NaN: the caller must see a poisoned tensor),
// clipped = finite elements that overflowed the format after scaling.
void quantize(float* x, int64_t n, int32_t dtype, float scale, float* amax, int64_t* clipped) {
  const formats::Format* f = formats::format_of(dtype);
  float top = 0.f;
  int64_t clips = 0, nans = 0;
  const float inv = 1.f / scale;
#pragma omp parallel for reduction(max : top) reduction(+ : clips, nans) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    if (std::isnan(a)) ++nans;
    else top = a > top ? a : top;
    if (!f) continue;
    bool clip = false;
    x[i] = formats::round_to(*f, x[i] * scale, &clip) * inv;
    clips += clip;
  }
  if (amax) *amax = nans ? NAN : top;
  if (clipped) *clipped = clips;
}

}  // namespace loom::cpu
