// The narrow number formats against hand-derived values: every fp8 code round-trips, ties go to
// even, overflow saturates (fp8) or becomes inf (bf16, fp16), NaN and inf are handled, and
// subnormals round on their fixed grid. Then the op-table cast built on them.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <loom/formats.hpp>
#include <vector>

#include "ops/cpu/kernels.hpp"

using namespace loom::formats;

namespace {

// IEEE half from its bits: (-1)^s 2^(e-15) (1 + m/1024), subnormal 2^-14 m/1024.
float decode16(uint16_t h) {
  const int e = (h >> 10) & 31, m = h & 1023;
  const float sign = (h & 0x8000) ? -1.f : 1.f;
  if (e == 31) return m ? NAN : sign * INFINITY;
  if (e == 0) return sign * std::ldexp(static_cast<float>(m), -24);
  return sign * std::ldexp(1.f + m / 1024.f, e - 15);
}

bool same(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) ||
         std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
}

}  // namespace

TEST_CASE("every fp8 code decodes to its hand-derived value and encodes back to itself") {
  // E4M3: exponent bias 7, no infinities, S.1111.111 is NaN; max 1.75 * 2^8 = 448.
  CHECK(decode8(kE4M3, 0x7e) == 448.f);
  CHECK(decode8(kE4M3, 0x38) == 1.f);                  // 0.0111.000 = 2^0
  CHECK(decode8(kE4M3, 0x01) == std::ldexp(1.f, -9));  // smallest subnormal 2^-6 * 1/8
  CHECK(decode8(kE4M3, 0x08) == std::ldexp(1.f, -6));  // smallest normal
  CHECK(decode8(kE4M3, 0x78) == 256.f);                // 0.1111.000 is a number in E4M3
  CHECK(std::isnan(decode8(kE4M3, 0x7f)));
  CHECK(std::isnan(decode8(kE4M3, 0xff)));
  // E5M2: bias 15, IEEE-like; max 1.75 * 2^15 = 57344.
  CHECK(decode8(kE5M2, 0x7b) == 57344.f);
  CHECK(decode8(kE5M2, 0x3c) == 1.f);
  CHECK(decode8(kE5M2, 0x01) == std::ldexp(1.f, -16));
  CHECK(decode8(kE5M2, 0x7c) == INFINITY);
  CHECK(decode8(kE5M2, 0xfc) == -INFINITY);
  CHECK(std::isnan(decode8(kE5M2, 0x7d)));
  for (const Format* f : {&kE4M3, &kE5M2}) {
    int nans = 0;
    for (int c = 0; c < 256; ++c) {
      const float v = decode8(*f, static_cast<uint8_t>(c));
      if (std::isnan(v)) {
        ++nans;
        CHECK(encode8(*f, v) == 0x7f);
        continue;
      }
      INFO(f->name << " code " << c << " value " << v);
      CHECK(encode8(*f, v) == c);
      CHECK(same(round_to(*f, v), v));  // a representable value is its own rounding
    }
    CHECK(nans == (f == &kE4M3 ? 2 : 6));
  }
}

TEST_CASE("fp8 rounds to nearest with ties to even, on the subnormal grid too") {
  // E4M3 spacing at [1, 2) is 1/8: 1 + 1/16 is halfway between 1 (even) and 1.125 (odd).
  CHECK(round_to(kE4M3, 1.0625f) == 1.f);
  CHECK(round_to(kE4M3, 1.1875f) == 1.25f);  // between 1.125 (odd) and 1.25 (even)
  CHECK(round_to(kE4M3, 1.07f) == 1.125f);
  CHECK(round_to(kE4M3, -1.0625f) == -1.f);
  // Subnormal spacing 2^-9: 2^-10 ties to 0, 3 * 2^-10 ties to 2 * 2^-9.
  CHECK(round_to(kE4M3, std::ldexp(1.f, -10)) == 0.f);
  CHECK(round_to(kE4M3, std::ldexp(3.f, -10)) == std::ldexp(1.f, -8));
  CHECK(round_to(kE4M3, std::ldexp(1.1f, -10)) == std::ldexp(1.f, -9));
  CHECK(std::signbit(round_to(kE4M3, -std::ldexp(1.f, -12))));  // underflow keeps the sign
  // E5M2 spacing at [1, 2) is 1/4.
  CHECK(round_to(kE5M2, 1.125f) == 1.f);
  CHECK(round_to(kE5M2, 1.375f) == 1.5f);
  CHECK(round_to(kE5M2, std::ldexp(1.f, -17)) == 0.f);  // half the smallest subnormal
}

TEST_CASE("fp8 saturates finite overflow, NaN stays NaN, inf is inf in E5M2 and NaN in E4M3") {
  bool clipped = false;
  CHECK(round_to(kE4M3, 448.f, &clipped) == 448.f);
  CHECK_FALSE(clipped);
  CHECK(round_to(kE4M3, 460.f, &clipped) == 448.f);  // would round to 448 anyway
  CHECK_FALSE(clipped);
  CHECK(round_to(kE4M3, 470.f, &clipped) == 448.f);  // would round to 480, past max
  CHECK(clipped);
  CHECK(round_to(kE4M3, -1e6f) == -448.f);
  CHECK(round_to(kE5M2, 61440.f) == 57344.f);  // ties to 65536: saturates
  CHECK(round_to(kE5M2, 1e30f) == 57344.f);
  CHECK(round_to(kE5M2, INFINITY) == INFINITY);
  CHECK(round_to(kE5M2, -INFINITY) == -INFINITY);
  CHECK(std::isnan(round_to(kE4M3, INFINITY)));
  CHECK(std::isnan(round_to(kE4M3, NAN)));
  CHECK(std::isnan(round_to(kE5M2, NAN)));
}

TEST_CASE("bf16 and fp16 round at their boundaries and overflow to infinity") {
  // bf16 keeps 7 mantissa bits: spacing at 1 is 2^-7.
  CHECK(round_to(kBf16, 1.f + std::ldexp(1.f, -8)) == 1.f);  // tie, to even
  CHECK(round_to(kBf16, 1.f + std::ldexp(3.f, -8)) == 1.f + std::ldexp(1.f, -6));
  CHECK(round_to(kBf16, 1.f + std::ldexp(1.f, -8) + std::ldexp(1.f, -20)) ==
        1.f + std::ldexp(1.f, -7));
  CHECK(round_bf16(0x1.fep127f) == 0x1.fep127f);  // bf16 max
  CHECK(round_bf16(0x1.ffp127f) == INFINITY);     // halfway past max: to even = overflow
  CHECK(round_bf16(std::ldexp(1.f, -133)) == std::ldexp(1.f, -133));  // smallest bf16 subnormal
  CHECK(std::isnan(round_bf16(NAN)));
  CHECK(round_bf16(-INFINITY) == -INFINITY);
  // fp16: 10 mantissa bits, max 65504, subnormals down to 2^-24.
  CHECK(round_to(kF16, 2049.f) == 2048.f);  // spacing 2 at 2048: tie to even
  CHECK(round_to(kF16, 2051.f) == 2052.f);
  CHECK(round_to(kF16, 65504.f) == 65504.f);
  CHECK(round_to(kF16, 65519.f) == 65504.f);
  bool clipped = false;
  CHECK(round_to(kF16, 65520.f, &clipped) == INFINITY);  // ties to 65536: overflow
  CHECK(clipped);
  CHECK(round_to(kF16, std::ldexp(1.f, -25)) == 0.f);
  CHECK(round_to(kF16, std::ldexp(1.5f, -25)) == std::ldexp(1.f, -24));
  CHECK(round_to(kF16, std::ldexp(3.f, -25)) == std::ldexp(1.f, -23));  // tie to even
  // Every finite half is its own rounding, and the midpoint above it rounds to the even side.
  for (int h = 0; h < 0x7c00; ++h) {
    const float v = decode16(static_cast<uint16_t>(h));
    REQUIRE(same(round_to(kF16, v), v));
    if (h + 1 < 0x7c00) {
      const float next = decode16(static_cast<uint16_t>(h + 1));
      const float mid = 0.5f * (v + next);
      REQUIRE(round_to(kF16, mid) == ((h & 1) ? next : v));
    }
  }
}

TEST_CASE("the CPU quantize kernel casts with a scale and reports amax and clipped elements") {
  std::vector<float> x = {0.1f, -3.f, 2.f, 1000.f};
  float amax = 0;
  int64_t clipped = -1;
  // scale 0.5 then E4M3 then / 0.5: 1000 * 0.5 = 500 saturates to 448 -> 896.
  loom::cpu::quantize(x.data(), 4, LOOM_FP8_E4M3, 0.5f, &amax, &clipped);
  CHECK(amax == 1000.f);
  CHECK(clipped == 1);
  CHECK(x[3] == 896.f);
  CHECK(x[1] == -3.f);
  CHECK(x[0] == doctest::Approx(round_to(kE4M3, 0.05f) * 2.f));
  // A finite value whose scaled product overflows fp32 saturates (fp8) and counts as clipped.
  std::vector<float> big = {3e38f, -3e38f};
  loom::cpu::quantize(big.data(), 2, LOOM_FP8_E5M2, 1e3f, &amax, &clipped);
  CHECK(clipped == 2);
  CHECK(big[0] == doctest::Approx(57344.f / 1e3f));
  CHECK(big[1] == doctest::Approx(-57344.f / 1e3f));
  std::vector<float> y = {1.f, NAN};
  loom::cpu::quantize(y.data(), 2, LOOM_BF16, 1.f, &amax, &clipped);
  CHECK(std::isnan(amax));
  CHECK(clipped == 0);
}

TEST_CASE("the vectorised CPU cast agrees with the scalar reference on every kind of value") {
  // Random magnitudes over fp32's whole range, every fp8 midpoint, and the special values.
  std::vector<float> values = {0.f,    -0.f,    INFINITY, -INFINITY, NAN,     448.f,
                               464.f,  470.f,   57344.f,  61440.f,   65504.f, 65520.f,
                               1e-45f, -1e-40f, 3.4e38f,  -3.4e38f};
  uint64_t s = 12345;
  for (int i = 0; i < 200000; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    values.push_back(std::bit_cast<float>(static_cast<uint32_t>(s >> 32)));
  }
  for (const Format* f : {&kE4M3, &kE5M2})
    for (int c = 0; c < 255; ++c) values.push_back(0.5f * (decode8(*f, c) + decode8(*f, c + 1)));
  for (int32_t dtype : {LOOM_BF16, LOOM_F16, LOOM_FP8_E4M3, LOOM_FP8_E5M2}) {
    const Format& f = *format_of(dtype);
    std::vector<float> x = values;
    int64_t clipped = 0, expected_clips = 0;
    float amax = 0;
    loom::cpu::quantize(x.data(), static_cast<int64_t>(x.size()), dtype, 1.f, &amax, &clipped);
    for (size_t i = 0; i < x.size(); ++i) {
      bool clip = false;
      const float want = round_to(f, values[i], &clip);
      expected_clips += clip;
      if (!same(x[i], want)) {
        INFO(f.name << ": " << values[i] << " cast to " << x[i] << ", reference " << want);
        REQUIRE(same(x[i], want));
      }
    }
    CHECK(clipped == expected_clips);
    CHECK(std::isnan(amax));  // a NaN is among the inputs
  }
}
