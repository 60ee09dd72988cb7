// The CUDA MoE routing kernels (ops/cuda/kernels/moe_routing.cuh) run on the CPU through the
// kernel harness, against the CPU's. Each row's loops are the CPU's in its order, so under the
// harness (the host's exp and log) the outputs are the CPU's to the bit, but for combine_rows's
// float multiply-adds, which a CPU built for its own machine may fuse. A GPU's double exp may
// differ in the last bit, which cuda_tests allows.
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "ops/cpu/kernels.hpp"
#include "ops/cuda/kernels/moe_routing.cuh"
#include "twins.hpp"

namespace {

using loom::kernel_tests::randn;
namespace mr = loom::cuda::moe_routing;

}  // namespace

TEST_CASE(
    "CUDA MoE router on the CPU: softmax, top-k with a tie, weights and per-sequence sums, and its "
    "backward") {
  for (int64_t K : {1, 2, 3}) {
    CAPTURE(K);
    const int64_t N = 300, E = 6, T = 50, B = N / T;  // more tokens than one block of threads
    std::vector<float> z = randn(N * E, 21, 2.f);
    z[7 * E + 1] = z[7 * E + 4] = 9.f;  // a tie for token 7's first choice: the lower expert wins
    loom::kh::HostGo go;
    std::vector<float> p(N * E), lse(N), w(N * K), p_c(N * E), lse_c(N), w_c(N * K);
    std::vector<int32_t> ex(N * K), ex_c(N * K);
    std::vector<double> seq(B * (E + 1)), seq_c(B * (E + 1));
    mr::router_topk(go, p.data(), lse.data(), w.data(), ex.data(), seq.data(), z.data(), N, E, K,
                    T);
    loom::cpu::router_topk(p_c.data(), lse_c.data(), w_c.data(), ex_c.data(), seq_c.data(),
                           z.data(), N, E, K, T);
    CHECK(ex == ex_c);
    CHECK(ex[7 * K] == 1);
    CHECK(p == p_c);
    CHECK(lse == lse_c);
    CHECK(w == w_c);
    CHECK(seq == seq_c);
    const std::vector<float> dw = randn(N * K, 22);
    std::vector<double> balance(B * E);
    for (int64_t i = 0; i < B * E; ++i) balance[i] = 0.01 * static_cast<double>(i % 7);
    std::vector<float> dz(N * E), dz_c(N * E);
    mr::router_topk_bwd(go, dz.data(), p.data(), lse.data(), w.data(), dw.data(), ex.data(),
                        balance.data(), 0.003, N, E, K, T);
    loom::cpu::router_topk_bwd(dz_c.data(), p.data(), lse.data(), w.data(), dw.data(), ex.data(),
                               balance.data(), 0.003, N, E, K, T);
    CHECK(dz == dz_c);
  }
}

TEST_CASE(
    "CUDA MoE row moves on the CPU: gather, weighted combine with dropped choices, and its "
    "backward") {
  const int64_t N = 90, K = 2,
                C = 33;  // N K C past one block; a row width that is no multiple of 4
  std::vector<int32_t> slot(N * K), token;
  for (int64_t i = 0; i < N * K; ++i) {  // every seventh choice dropped; kept rows in reverse order
    slot[i] = i % 7 == 2 ? -1 : 0;
    if (slot[i] == 0) token.push_back(static_cast<int32_t>(i / K));
  }
  const int64_t R = static_cast<int64_t>(token.size());
  for (int64_t i = 0, r = R; i < N * K; ++i)
    if (slot[i] == 0)
      slot[i] = static_cast<int32_t>(--r), token[slot[i]] = static_cast<int32_t>(i / K);
  const std::vector<float> h = randn(N * C, 23), w = randn(N * K, 24), dy = randn(N * C, 25);
  loom::kh::HostGo go;
  std::vector<float> rows(R * C), rows_c(R * C);
  mr::gather_rows(go, rows.data(), h.data(), token.data(), R, C);
  loom::cpu::gather_rows(rows_c.data(), h.data(), token.data(), R, C);
  CHECK(rows == rows_c);
  for (const float* wt : {w.data(), static_cast<const float*>(nullptr)}) {
    std::vector<float> y(N * C, 5.f), y_c(N * C, 5.f);
    mr::combine_rows(go, y.data(), rows.data(), wt, slot.data(), N, K, C);
    loom::cpu::combine_rows(y_c.data(), rows.data(), wt, slot.data(), N, K, C);
    CHECK(loom::kernel_tests::distance(y, y_c) < 1e-6);  // the CPU build may fuse the multiply-adds
  }
  std::vector<float> drows(R * C), drows_c(R * C), dw(N * K, 5.f), dw_c(N * K, 5.f);
  mr::combine_rows_bwd(go, drows.data(), dw.data(), dy.data(), rows.data(), w.data(), slot.data(),
                       N, K, C);
  loom::cpu::combine_rows_bwd(drows_c.data(), dw_c.data(), dy.data(), rows.data(), w.data(),
                              slot.data(), N, K, C);
  CHECK(drows == drows_c);
  CHECK(dw == dw_c);
  CHECK(dw[2] == 0.f);  // dropped
}
