// The CUDA norm kernels (ops/cuda/kernels/norms.cuh, columns.cuh) run on the CPU through the
// kernel harness, against the CPU's: LayerNorm with and without bias and RMSNorm, forward and
// backward, over rows that leave a partial block of warps, widths that are not a multiple of
// 32 (a partial column block), and enough rows for several row chunks, the last partial. The
// weight and bias gradients accumulate into what was there.
#include "ops/cuda/kernels/norms.cuh"

#include <doctest/doctest.h>

#include <vector>

#include "ops/cpu/kernels.hpp"
#include "twins.hpp"

namespace {

using loom::kernel_tests::distance;
using loom::kernel_tests::randn;

void check_layernorm(int64_t N, int64_t C, bool bias, uint64_t seed) {
  CAPTURE(N);
  CAPTURE(C);
  const std::vector<float> x = randn(N * C, seed), w = randn(C, seed + 1), b = randn(C, seed + 2),
                           dout = randn(N * C, seed + 3);
  std::vector<float> out(N * C), mean(N), rstd(N), out_c = out, mean_c = mean, rstd_c = rstd;
  loom::kh::HostGo go;
  loom::cuda::norms::layernorm_fwd(go, out.data(), mean.data(), rstd.data(), x.data(), w.data(),
                                   bias ? b.data() : nullptr, N, C, 1e-5f);
  loom::cpu::layernorm_fwd(out_c.data(), mean_c.data(), rstd_c.data(), x.data(), w.data(),
                           bias ? b.data() : nullptr, N, C);
  CHECK(distance(out, out_c) < 1e-5);
  CHECK(distance(mean, mean_c) < 1e-5);
  CHECK(distance(rstd, rstd_c) < 1e-5);
  std::vector<float> dinp(N * C), dw = randn(C, seed + 4), db = randn(C, seed + 5);
  std::vector<float> dinp_c = dinp, dw_c = dw, db_c = db;
  loom::cuda::norms::layernorm_bwd(go, dinp.data(), dw.data(), bias ? db.data() : nullptr,
                                   dout.data(), x.data(), w.data(), mean_c.data(), rstd_c.data(), N,
                                   C);
  loom::cpu::layernorm_bwd(dinp_c.data(), dw_c.data(), bias ? db_c.data() : nullptr, dout.data(),
                           x.data(), w.data(), mean_c.data(), rstd_c.data(), N, C);
  CHECK(distance(dinp, dinp_c) < 1e-5);
  CHECK(distance(dw, dw_c) < 1e-5);
  CHECK(distance(db, db_c) < 1e-5);
}

void check_rmsnorm(int64_t N, int64_t C, uint64_t seed) {
  CAPTURE(N);
  CAPTURE(C);
  const std::vector<float> x = randn(N * C, seed), w = randn(C, seed + 1),
                           dout = randn(N * C, seed + 2);
  std::vector<float> out(N * C), rstd(N), out_c = out, rstd_c = rstd;
  loom::kh::HostGo go;
  loom::cuda::norms::rmsnorm_fwd(go, out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-6f);
  loom::cpu::rmsnorm_fwd_eps(out_c.data(), rstd_c.data(), x.data(), w.data(), N, C, 1e-6f);
  CHECK(distance(out, out_c) < 1e-5);
  CHECK(distance(rstd, rstd_c) < 1e-5);
  std::vector<float> dinp(N * C), dw = randn(C, seed + 3), dinp_c = dinp, dw_c = dw;
  loom::cuda::norms::rmsnorm_bwd(go, dinp.data(), dw.data(), dout.data(), x.data(), w.data(),
                                 rstd_c.data(), N, C);
  loom::cpu::rmsnorm_bwd(dinp_c.data(), dw_c.data(), dout.data(), x.data(), w.data(), rstd_c.data(),
                         N, C);
  CHECK(distance(dinp, dinp_c) < 1e-5);
  CHECK(distance(dw, dw_c) < 1e-5);
}

}  // namespace

TEST_CASE(
    "CUDA LayerNorm on the CPU: forward and backward, with and without bias, partial blocks and "
    "chunks") {
  check_layernorm(37, 100, true,
                  1);  // 5 blocks of 8 rows, the last of 5; 4 column blocks, the last of 4
  check_layernorm(700, 45, false, 2);  // 64 chunks of 11 rows, the last partial
  check_layernorm(3, 300, true, 3);    // rows longer than a warp's pass many times over
}

TEST_CASE("CUDA RMSNorm on the CPU: forward and backward, partial blocks and chunks") {
  check_rmsnorm(37, 100, 4);
  check_rmsnorm(700, 45, 5);
}
