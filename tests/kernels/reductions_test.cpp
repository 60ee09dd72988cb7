// The CUDA reductions, AdamW and wire codecs (ops/cuda/kernels/reductions.cuh, adamw.cuh,
// codecs.cuh) run on the CPU through the kernel harness, against the CPU's: the sum of squares,
// quantize (bit for bit, with its amax, NaN and clipped counts) for every narrow format, the
// multi-tensor AdamW, and the codecs byte for byte: bf16 both ways, and E4M3 blocks encoded and
// decoded in every mode over values that reach every branch (zero and -0, subnormal codes,
// saturation, inf, NaN, an all-zero block, a short last block). One translation unit: a kernel
// header defines its __global__ functions where it is included.
#include "ops/cuda/kernels/reductions.cuh"

#include <doctest/doctest.h>
#include <loom/plugin.h>

#include <cmath>
#include <cstring>
#include <loom/formats.hpp>
#include <vector>

#include "ops/cpu/kernels.hpp"
#include "ops/cuda/kernels/adamw.cuh"
#include "ops/cuda/kernels/codecs.cuh"
#include "twins.hpp"

namespace {

using loom::kernel_tests::distance;
using loom::kernel_tests::randn;
namespace rd = loom::cuda::reductions;

}  // namespace

TEST_CASE(
    "CUDA sum of squares on the CPU: none, one partial block, several, and past 1024 blocks") {
  loom::kh::HostGo go;
  for (int64_t n : {0, 100, 5000, 270000}) {  // 270000: 1024 blocks, each thread striding
    CAPTURE(n);
    const std::vector<float> x = randn(n + 1, 1);
    double* total = go.workspace<double>(1);
    rd::sum_squares(go, total, x.data(), n);
    const double want = loom::cpu::sum_squares(x.data(), n);
    CHECK(*total == doctest::Approx(want).epsilon(1e-12));
  }
}

namespace {

void check_quantize(int64_t n) {
  CAPTURE(n);
  loom::kh::HostGo go;
  std::vector<float> x = randn(n, 2, 100.f);
  x[7] = 1e6f, x[8] = -3e38f;      // clipped in fp8 and fp16
  x[9] = INFINITY, x[10] = 1e-9f;  // inf; subnormal in the narrow formats
  for (int32_t dtype : {LOOM_BF16, LOOM_F16, LOOM_FP8_E4M3, LOOM_FP8_E5M2}) {
    CAPTURE(dtype);
    for (float scale : {1.f, 0.01f}) {
      std::vector<float> a = x, b = x;
      rd::CastStats* stats = go.workspace<rd::CastStats>(1);
      rd::quantize(go, stats, a.data(), n, rd::narrow_format(dtype), scale);
      float amax = 0;
      int64_t clipped = -1;
      loom::cpu::quantize(b.data(), n, dtype, scale, &amax, &clipped);
      CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
      CHECK(stats->amax == amax);
      CHECK(static_cast<int64_t>(stats->clips) == clipped);
      CHECK(stats->nans == 0);
    }
  }
  x[11] = NAN;
  rd::CastStats* stats = go.workspace<rd::CastStats>(1);
  rd::quantize(go, stats, x.data(), n, rd::narrow_format(-1), 1.f);  // statistics only
  CHECK(stats->nans == 1);
  CHECK(stats->amax == INFINITY);
  CHECK(stats->clips == 0);
}

void check_adamw(const std::vector<int64_t>& numel, const std::vector<float>& wd) {
  std::vector<std::vector<float>> p, g, m, v;
  for (size_t t = 0; t < numel.size(); ++t) {
    p.push_back(randn(numel[t], 10 + t)), g.push_back(randn(numel[t], 20 + t));
    m.push_back(randn(numel[t], 30 + t, 0.1f)), v.push_back(randn(numel[t], 40 + t, 0.1f));
    for (float& x : v.back()) x = x * x;
  }
  auto pc = p, mc = m, vc = v;
  std::vector<float*> pp, mp, vp;
  std::vector<const float*> gp;
  for (size_t t = 0; t < numel.size(); ++t) {
    pp.push_back(p[t].data()), gp.push_back(g[t].data());
    mp.push_back(m[t].data()), vp.push_back(v[t].data());
  }
  loom::kh::HostGo go;
  loom::cuda::adam::run(go, static_cast<int64_t>(numel.size()), pp.data(), gp.data(), mp.data(),
                        vp.data(), numel.data(), wd.data(), 1e-3f, 0.9f, 0.95f, 1e-8f, 7);
  for (size_t t = 0; t < numel.size(); ++t) {
    CAPTURE(t);
    loom::cpu::adamw(pc[t].data(), g[t].data(), mc[t].data(), vc[t].data(), numel[t], 1e-3f, 0.9f,
                     0.95f, 1e-8f, wd[t], 7);
    CHECK(distance(p[t], pc[t]) < 1e-6);
    CHECK(distance(m[t], mc[t]) < 1e-6);
    CHECK(distance(v[t], vc[t]) < 1e-6);
  }
}

}  // namespace

TEST_CASE("the CUDA quantize's formats are loom/formats.hpp's") {
  for (int32_t dtype : {LOOM_BF16, LOOM_F16, LOOM_FP8_E4M3, LOOM_FP8_E5M2}) {
    CAPTURE(dtype);
    const loom::formats::Format& f = *loom::formats::format_of(dtype);
    const rd::NarrowFormat g = rd::narrow_format(dtype);
    CHECK(g.man == f.man_bits);
    CHECK(g.emin == f.emin());
    CHECK(g.max == f.max);
    CHECK(g.has_inf == f.has_inf);
    CHECK(g.saturates == f.saturates);
    CHECK(g.bf16 == (dtype == LOOM_BF16));
  }
  CHECK(rd::narrow_format(LOOM_F32).man < 0);
}

TEST_CASE(
    "CUDA quantize on the CPU: bit for bit with the CPU in every narrow format, with amax and "
    "counts") {
  check_quantize(3000);   // 12 blocks, the last partial
  check_quantize(20000);  // 79 blocks, the last partial
}

TEST_CASE(
    "CUDA multi-tensor AdamW on the CPU: tensors of several chunks, one element and none, decay "
    "per tensor") {
  check_adamw({5, 40000, 1, 0, 333},
              {0.1f, 0.f, 0.1f, 0.1f, 0.05f});  // 40000: 3 chunks, the last partial
  check_adamw({16384, 16385}, {0.f, 0.2f});     // a whole chunk, and one more element
}

namespace {

namespace cc = loom::cuda::codecs;
using loom::kernel_tests::randn;

// Gaussian values over six decades, with the special values planted at fixed places.
std::vector<float> awkward(int64_t n, uint64_t seed) {
  std::vector<float> x = randn(n, seed);
  for (int64_t i = 0; i < n; ++i) x[i] *= std::pow(10.f, static_cast<float>(i % 7) - 3.f);
  if (n > 12) {
    x[1] = 0.f, x[2] = -0.f, x[3] = 1e-9f, x[4] = -3e-3f, x[5] = 1e30f;
    x[6] = INFINITY, x[7] = NAN, x[8] = -INFINITY, x[9] = 448.f, x[10] = 1e-40f;
  }
  return x;
}

template <class T>
bool same_bytes(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

}  // namespace

TEST_CASE("CUDA bf16 wire codec on the CPU: the SDK's rounding and exact widening, bit for bit") {
  loom::kh::HostGo go;
  for (int64_t n : {1, 300, 5000}) {
    CAPTURE(n);
    const std::vector<float> x = awkward(n, 3);
    std::vector<uint16_t> a(n, 1), b(n, 2);
    cc::to_bf16(go, a.data(), x.data(), n);
    loom::cpu::to_bf16(b.data(), x.data(), n);
    CHECK(same_bytes(a, b));
    std::vector<float> wa(n, 1.f), wb(n, 2.f);
    cc::from_bf16(go, wa.data(), a.data(), n);
    loom::cpu::from_bf16(wb.data(), b.data(), n);
    CHECK(same_bytes(wa, wb));
  }
}

TEST_CASE("CUDA E4M3 wire blocks on the CPU: encode and decode in each mode, byte for byte") {
  loom::kh::HostGo go;
  // (count, width, blocks): whole blocks, a short last block, blocks past count, one wide block.
  // (37, 13, 3): odd widths, so the scales sit unaligned; its first block holds values below
  // 448 / FLT_MAX, whose scale saturates at FLT_MAX instead of becoming inf.
  const int64_t shapes[][3] = {{64, 16, 4},     {50, 16, 4},   {20, 16, 4},
                               {3000, 3000, 1}, {700, 300, 3}, {37, 13, 3}};
  for (const auto& s : shapes) {
    const int64_t count = s[0], width = s[1], blocks = s[2], bytes = blocks * (4 + width);
    CAPTURE(count);
    CAPTURE(width);
    CAPTURE(blocks);
    std::vector<float> x = awkward(width * blocks, 5);
    for (int64_t i = width; i < 2 * width && i < count; ++i)
      x[i] = 0.f;  // an all-zero block: scale 1
    if (width == 13)
      for (int64_t i = 0; i < width; ++i) x[i] = 1e-38f * static_cast<float>(i + 1);
    std::vector<uint8_t> a(bytes, 7), b(bytes, 9);
    cc::encode_blocks(go, a.data(), x.data(), count, width, blocks);
    loom::cpu::encode_blocks(b.data(), x.data(), count, width, blocks);
    CHECK(same_bytes(a, b));
    for (int32_t flags : {0, LOOM_BLOCKS_ADD, LOOM_BLOCKS_SUM, LOOM_BLOCKS_SUM | LOOM_BLOCKS_ADD}) {
      CAPTURE(flags);
      const int64_t n = (flags & LOOM_BLOCKS_SUM) ? width : width * blocks;
      const std::vector<float> start = randn(n, 11);
      std::vector<float> da = start, db = start;
      cc::decode_blocks(go, da.data(), a.data(), count, width, blocks, flags);
      loom::cpu::decode_blocks(db.data(), b.data(), count, width, blocks, flags);
      CHECK(same_bytes(da, db));
      CHECK(!same_bytes(da, start));  // something was written
    }
    if (width == 13) {  // the tiny block comes back finite and close
      std::vector<float> back(width, -1.f);
      loom::cpu::decode_blocks(back.data(), b.data(), width, width, 1, 0);
      for (int64_t i = 0; i < width; ++i) CHECK(back[i] == doctest::Approx(x[i]).epsilon(0.07));
    }
  }
}
