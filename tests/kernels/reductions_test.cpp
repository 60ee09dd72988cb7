// The CUDA reductions and AdamW (ops/cuda/kernels/reductions.cuh, adamw.cuh) run on the CPU
// through the kernel harness, against the CPU's: the sum of squares, quantize (bit for bit, with
// its amax, NaN and clipped counts) for every narrow format, and the multi-tensor AdamW.
#include "ops/cuda/kernels/reductions.cuh"

#include <doctest/doctest.h>
#include <loom/plugin.h>

#include <cstring>
#include <loom/formats.hpp>
#include <vector>

#include "ops/cpu/kernels.hpp"
#include "ops/cuda/kernels/adamw.cuh"
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
