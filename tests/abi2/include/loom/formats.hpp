// Number formats narrower than fp32, as scalar reference code: the value an fp32 rounds to, and
// the bit codes of the 8-bit formats. The CPU quantize kernel casts with these, plugins that put
// fp8 on a wire encode with them (ddp's reduce_dtype = "fp8"); the tests check them against
// hand-derived tables; a device with native formats must agree with them. C++20.
//
// | format   | exp | man | bias | max finite | infinities | finite overflow   |
// |----------|-----|-----|------|------------|------------|-------------------|
// | bf16     | 8   | 7   | 127  | 3.39e38    | yes        | -> inf (IEEE)     |
// | fp16     | 5   | 10  | 15   | 65504      | yes        | -> inf (IEEE)     |
// | fp8 E4M3 | 4   | 3   | 7    | 448        | no         | saturates to max  |
// | fp8 E5M2 | 5   | 2   | 15   | 57344      | yes        | saturates to max  |
//
// Every cast rounds to nearest, ties to even. NaN stays NaN. An infinite input stays infinite
// where the format has infinities and becomes NaN in E4M3 (its only non-finite code).
// fp8 saturates as Transformer Engine's casts do: with per-tensor scaling, clamping one outlier
// beats turning it into a non-finite value that poisons the whole GEMM.
#pragma once

#if !defined(__cplusplus) || __cplusplus < 202002L
#error \
    "<loom/formats.hpp> needs C++20 (std::bit_cast; compile with -std=c++20); <loom/bf16.hpp> converts bf16 under C++11 and later"
#endif

#include <loom/plugin.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <loom/bf16.hpp>

namespace loom::formats {

struct Format {
  const char* name;
  int exp_bits, man_bits, bias;
  float max;                             // largest finite value
  bool has_inf;                          // IEEE infinities exist
  bool saturates;                        // finite overflow clamps to +-max instead of becoming inf
  int emin() const { return 1 - bias; }  // exponent of the smallest normal
};

inline constexpr Format kBf16{"bf16", 8, 7, 127, 0x1.fep127f, true, false};
inline constexpr Format kF16{"fp16", 5, 10, 15, 65504.f, true, false};
inline constexpr Format kE4M3{"fp8_e4m3", 4, 3, 7, 448.f, false, true};
inline constexpr Format kE5M2{"fp8_e5m2", 5, 2, 15, 57344.f, true, true};

// The format a loom_dtype casts through; null for fp32 and the non-float types.
inline const Format* format_of(int32_t dtype) {
  switch (dtype) {
    case LOOM_BF16:
      return &kBf16;
    case LOOM_F16:
      return &kF16;
    case LOOM_FP8_E4M3:
      return &kE4M3;
    case LOOM_FP8_E5M2:
      return &kE5M2;
    default:
      return nullptr;
  }
}

// bf16 keeps the upper 16 bits of the fp32 pattern, rounded to nearest-even (loom/bf16.hpp):
// normals, subnormals and overflow need no separate cases.
inline float round_bf16(float x) { return sdk::bf16_to_f32(sdk::f32_to_bf16(x)); }

// |x| = m 2^e lies on the grid of spacing q = 2^(max(e, emin) - man): below the smallest normal
// the spacing stops shrinking (subnormals). rint(|x| / q) q is the nearest grid point with ties
// to even (rint in the default rounding mode), exact because q is a power of two and |x| / q
// < 2^(man + 2) fits fp32's mantissa. A result past max overflowed.
// `clipped` is set when a finite x overflowed (saturated or became inf).
inline float round_to(const Format& f, float x, bool* clipped = nullptr) {
  if (&f == &kBf16) {
    float r = round_bf16(x);
    if (clipped && std::isfinite(x) && std::isinf(r)) *clipped = true;
    return r;
  }
  if (std::isnan(x)) return x;
  if (std::isinf(x)) return f.has_inf ? x : NAN;
  const float a = std::fabs(x);
  float r;
  if (a > 2.f * f.max) {
    r = INFINITY;  // far past the largest binade: overflow without computing a huge grid step
  } else {
    int e = static_cast<int>((std::bit_cast<uint32_t>(a) >> 23) & 0xff) - 127;
    if (e < f.emin()) e = f.emin();
    const int shift = e - f.man_bits;  // q = 2^shift, within fp32's normal range for these formats
    const float q = std::bit_cast<float>(static_cast<uint32_t>(shift + 127) << 23);
    const float inv_q = std::bit_cast<float>(static_cast<uint32_t>(127 - shift) << 23);
    r = std::nearbyint(a * inv_q) * q;
  }
  if (r > f.max) {
    if (clipped) *clipped = true;
    r = f.saturates ? f.max : INFINITY;
  }
  return std::copysign(r, x);
}

// ---- 8-bit codes: sign | exponent | mantissa ----

// The value of an fp8 code (E4M3 or E5M2).
inline float decode8(const Format& f, uint8_t code) {
  const int man_mask = (1 << f.man_bits) - 1, exp_max = (1 << f.exp_bits) - 1;
  const int exp = (code >> f.man_bits) & exp_max, man = code & man_mask;
  const float sign = (code & 0x80) ? -1.f : 1.f;
  if (exp == exp_max) {
    if (f.has_inf) return man == 0 ? sign * INFINITY : NAN;  // E5M2: IEEE-like
    if (man == man_mask) return NAN;                         // E4M3: S.1111.111 only
  }
  if (exp == 0) return sign * std::ldexp(static_cast<float>(man), f.emin() - f.man_bits);
  return sign * std::ldexp(1.f + static_cast<float>(man) / (1 << f.man_bits), exp - f.bias);
}

// The code of round_to(f, x): the canonical NaN is 0x7f (both formats), and -0 keeps its sign.
inline uint8_t encode8(const Format& f, float x) {
  const float r = round_to(f, x);
  if (std::isnan(r)) return 0x7f;
  const uint8_t sign = std::signbit(r) ? 0x80 : 0;
  const float a = std::fabs(r);
  if (std::isinf(a)) return sign | static_cast<uint8_t>(((1 << f.exp_bits) - 1) << f.man_bits);
  if (a == 0.f) return sign;
  int e;
  std::frexp(a, &e);  // a = m 2^e, m in [0.5, 1): the unbiased exponent is e - 1
  const int unbiased = e - 1;
  if (unbiased < f.emin())  // subnormal: a = man 2^(emin - man_bits)
    return sign | static_cast<uint8_t>(std::ldexp(a, f.man_bits - f.emin()));
  const int man = static_cast<int>(std::ldexp(a, f.man_bits - unbiased)) - (1 << f.man_bits);
  return sign | static_cast<uint8_t>(((unbiased + f.bias) << f.man_bits) | man);
}

// ---- E4M3 blocks on a wire: the fp32 scale, then the codes ----
// What plugins that reduce or gather in fp8 exchange (ddp's and zero's reduce_dtype = "fp8",
// zero3's gather_dtype = "fp8"): a scale per block maps the block's largest magnitude to 448, so
// no rank has to agree on a scale with the others before it sends.
inline constexpr int64_t kBlockScaleBytes = 4;
inline constexpr int64_t block_bytes(int64_t width) { return kBlockScaleBytes + width; }

// `width` codes of x[i] * scale behind the scale; codes past `count` are zero.
inline void encode_block(const float* x, int64_t count, int64_t width, uint8_t* out) {
  float amax = 0.f;
  for (int64_t i = 0; i < count; ++i) amax = std::fmax(amax, std::fabs(x[i]));
  // At most FLT_MAX: a block whose values all lie below 448 / FLT_MAX keeps finite codes.
  const float scale =
      amax > 0.f && std::isfinite(amax) ? std::fmin(kE4M3.max / amax, 0x1.fffffep127f) : 1.f;
  std::memcpy(out, &scale, kBlockScaleBytes);
  for (int64_t i = 0; i < width; ++i)
    out[kBlockScaleBytes + i] = i < count ? encode8(kE4M3, x[i] * scale) : 0;
}

// x[i] = (or, with `add`, +=) the block's i-th value, for i < count.
inline void decode_block(const uint8_t* in, int64_t count, float* x, bool add) {
  float scale;
  std::memcpy(&scale, in, kBlockScaleBytes);
  for (int64_t i = 0; i < count; ++i) {
    const float v = decode8(kE4M3, in[kBlockScaleBytes + i]) / scale;
    x[i] = add ? x[i] + v : v;
  }
}

}  // namespace loom::formats
