#include <bit>
#include <cfloat>
#include <cmath>
#include <loom/formats.hpp>
#include <string>

#include "core/errors.hpp"
#include "ops/cpu/kernels.hpp"

namespace loom::cpu {

namespace {

// formats::round_to written without branches so the loop vectorises; the tests hold it to the
// scalar reference value for value. With a = |v| = m 2^e, q = 2^(max(e, emin) - man):
//   rint(a / q) = (a / q + 2^23) - 2^23   (a / q < 2^(man + 2), so the add rounds to nearest-even)
// 1/q and q are built in the exponent bits; an inf or NaN v flows through as inf or NaN and is
// fixed up by the selects at the end.
inline float cast_grid(const formats::Format& f, float v, int64_t& clips) {
  const uint32_t abs_bits = std::bit_cast<uint32_t>(v) & 0x7fffffffu;
  const float a = std::bit_cast<float>(abs_bits);
  int32_t eb = static_cast<int32_t>(abs_bits >> 23);  // biased fp32 exponent of a
  const int32_t eb_min = f.emin() + 127;
  eb = eb < eb_min ? eb_min : eb;
  eb =
      eb > 254 - f.man_bits ? 254 - f.man_bits : eb;  // keeps 1/q normal; such a is past max anyway
  const float inv_q = std::bit_cast<float>(static_cast<uint32_t>(254 - eb + f.man_bits) << 23);
  const float q = std::bit_cast<float>(static_cast<uint32_t>(eb - f.man_bits) << 23);
  float r = ((a * inv_q + 0x1p23f) - 0x1p23f) * q;
  const bool finite = abs_bits < 0x7f800000u;
  const bool over = finite && r > f.max;
  clips += over;
  r = over ? (f.saturates ? f.max : INFINITY) : r;
  r = abs_bits == 0x7f800000u ? (f.has_inf ? INFINITY : NAN) : r;
  r = abs_bits > 0x7f800000u ? v : r;
  return std::copysign(r, v);
}

// x * scale, except that a finite x whose product overflows fp32 becomes +-FLT_MAX, so the cast
// saturates or overflows it (and counts it) like any other large value.
inline float overflow_to_max(float x, float scale) {
  const float v = x * scale;
  return std::isinf(v) && std::isfinite(x) ? std::copysign(FLT_MAX, v) : v;
}

// max |x[i]|, NaN when any x[i] is NaN: the caller must see a poisoned tensor. On the bits: |x|'s
// bits order as |x| does, and every NaN's lie above inf's (0x7f800000), so one integer max, which
// vectorises, finds both.
float abs_max(const float* x, int64_t n) {
  uint32_t top = 0;
#pragma omp parallel for simd reduction(max : top) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t a = std::bit_cast<uint32_t>(x[i]) & 0x7fffffffu;
    top = a > top ? a : top;
  }
  return top > 0x7f800000u ? NAN : std::bit_cast<float>(top);
}

}  // namespace

// x[i] = cast(x[i] * scale) * (1 / scale) through the narrow format (loom/formats.hpp), in place.
// amax = max |x[i]| of the input, clipped = finite elements that overflowed the format after
// scaling.
void quantize(float* x, int64_t n, int32_t dtype, float scale, float* amax, int64_t* clipped) {
  const formats::Format* f = formats::format_of(dtype);
  const float inv = 1.f / scale;
  int64_t clips = 0;
  if (amax) *amax = abs_max(x, n);
  if (!clipped && f == &formats::kBf16) {  // nothing to count: a loop without the reduction
#pragma omp parallel for simd if (n > 65536)
    for (int64_t i = 0; i < n; ++i) x[i] = formats::round_bf16(overflow_to_max(x[i], scale)) * inv;
    return;
  }
  if (f == &formats::kBf16) {
#pragma omp parallel for reduction(+ : clips) if (n > 65536)
    for (int64_t i = 0; i < n; ++i) {
      const float v = overflow_to_max(x[i], scale), r = formats::round_bf16(v);
      clips += std::isfinite(v) && std::isinf(r);
      x[i] = r * inv;
    }
  } else if (f) {
#pragma omp parallel for reduction(+ : clips) if (n > 65536)
    for (int64_t i = 0; i < n; ++i) x[i] = cast_grid(*f, overflow_to_max(x[i], scale), clips) * inv;
  }
  if (clipped) *clipped = clips;
}

// dst[i] = bf16(src[i] * scale): quantize's rounding and counts, kept in bf16's 16 bits.
void quantize_into(void* dst, int32_t dtype, const float* src, int64_t n, float scale, float* amax,
                   int64_t* clipped) {
  if (dtype != LOOM_BF16)
    throw RuntimeError("quantize_into on the CPU stores bf16 only, not dtype " +
                       std::to_string(dtype));
  uint16_t* out = static_cast<uint16_t*>(dst);
  if (scale == 1.f && !amax && !clipped) {  // a bf16 GEMM operand: nothing to scale or count
#pragma omp parallel for simd if (n > 65536)
    for (int64_t i = 0; i < n; ++i) out[i] = sdk::f32_to_bf16(src[i]);
    return;
  }
  int64_t clips = 0;
  uint32_t top = 0;  // abs_max's bits, in the same pass
#pragma omp parallel for simd reduction(+ : clips) reduction(max : top) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t a = std::bit_cast<uint32_t>(src[i]) & 0x7fffffffu;
    top = a > top ? a : top;
    const float v = overflow_to_max(src[i], scale);
    const uint16_t h = sdk::f32_to_bf16(v);
    out[i] = h;
    clips += (std::bit_cast<uint32_t>(v) & 0x7fffffffu) < 0x7f800000u && (h & 0x7fffu) == 0x7f80u;
  }
  if (amax) *amax = top > 0x7f800000u ? NAN : std::bit_cast<float>(top);
  if (clipped) *clipped = clips;
}

}  // namespace loom::cpu
