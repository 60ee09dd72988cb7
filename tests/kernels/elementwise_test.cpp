// The CUDA element-wise kernels (ops/cuda/kernels/elementwise.cuh, softmax_xent.cuh,
// vocab_xent.cuh, rope.cuh) run on the CPU through the kernel harness, against the CPU's. The
// vectorised maps run both ways: aligned with a tail that is not a multiple of 4, and misaligned
// (one by one).
#include "ops/cuda/kernels/elementwise.cuh"

#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "ops/cpu/kernels.hpp"
#include "ops/cuda/kernels/rope.cuh"
#include "ops/cuda/kernels/softmax_xent.cuh"
#include "ops/cuda/kernels/vocab_xent.cuh"
#include "twins.hpp"

namespace {

using loom::kernel_tests::distance;
using loom::kernel_tests::randn;
namespace ew = loom::cuda::elementwise;

// Runs f(offset) for an aligned start and a misaligned one (offset 1 float), over n elements.
template <class F>
void both_alignments(F f) {
  for (int64_t offset : {0, 1}) {
    CAPTURE(offset);
    f(offset);
  }
}

}  // namespace

TEST_CASE(
    "CUDA GELU (tanh and erf), add, accumulate and scale on the CPU: float4 with a tail, and "
    "misaligned") {
  for (int64_t n :
       {1027, 2562}) {  // 2 and 3 blocks of 256 threads of 4, the last thread with 3 and 2
    CAPTURE(n);
    const std::vector<float> x = randn(n + 1, 1, 2.f), y = randn(n + 1, 2), dout = randn(n + 1, 3);
    loom::kh::HostGo go;
    both_alignments([&](int64_t o) {
      std::vector<float> a(n), b(n);
      ew::map(go, a.data(), x.data() + o, n, ew::Gelu{});
      loom::cpu::gelu_fwd(b.data(), x.data() + o, n);
      CHECK(distance(a, b) < 1e-5);
      ew::zip(go, a.data(), x.data() + o, dout.data() + o, n, ew::GeluGrad{});
      loom::cpu::gelu_bwd(b.data(), x.data() + o, dout.data() + o, n);
      CHECK(distance(a, b) < 1e-5);
      ew::map(go, a.data(), x.data() + o, n, ew::GeluErf{});
      loom::cpu::gelu_erf_fwd(b.data(), x.data() + o, n);
      CHECK(distance(a, b) < 1e-5);
      ew::zip(go, a.data(), x.data() + o, dout.data() + o, n, ew::GeluErfGrad{});
      loom::cpu::gelu_erf_bwd(b.data(), x.data() + o, dout.data() + o, n);
      CHECK(distance(a, b) < 1e-5);
      ew::zip(go, a.data(), x.data() + o, y.data() + o, n, ew::Add{});
      loom::cpu::add(b.data(), x.data() + o, y.data() + o, n);
      CHECK(distance(a, b) == 0);
      ew::zip(go, a.data(), a.data(), y.data() + o, n, ew::Add{});
      loom::cpu::accumulate(b.data(), y.data() + o, n);
      CHECK(distance(a, b) == 0);
      std::vector<float> s(x.begin() + o, x.begin() + o + n), t = s;
      ew::map(go, s.data(), s.data(), n, ew::Times{0.37f});
      loom::cpu::scale(t.data(), 0.37f, n);
      CHECK(distance(s, t) == 0);
    });
  }
}

TEST_CASE(
    "CUDA bias add and bias gradient on the CPU: widths a multiple of 4 and not, partial chunks") {
  loom::kh::HostGo go;
  for (int64_t C : {64, 30, 260}) {  // 260: two blocks of columns to fold
    for (int64_t N : {5, 300}) {
      CAPTURE(C);
      CAPTURE(N);
      const std::vector<float> bias = randn(C, 10), dout = randn(N * C, 11);
      std::vector<float> out = randn(N * C, 12), out_c = out, db = randn(C, 13), db_c = db;
      ew::bias_add(go, out.data(), bias.data(), N, C);
      loom::cpu::bias_add(out_c.data(), bias.data(), N, C);
      CHECK(distance(out, out_c) == 0);
      ew::bias_bwd(go, db.data(), dout.data(), N, C);
      loom::cpu::bias_bwd(db_c.data(), dout.data(), N, C);
      CHECK(distance(db, db_c) < 1e-5);
    }
  }
}

namespace {

void check_embedding_swiglu(int64_t B, int64_t T, int64_t C, int64_t V, int64_t F) {
  CAPTURE(C);
  const int64_t N = B * T;
  std::vector<int32_t> tok(N);
  for (int64_t i = 0; i < N; ++i) tok[i] = static_cast<int32_t>((i * 7) % V);
  const std::vector<float> wte = randn(V * C, 20), wpe = randn(T * C, 21), dout = randn(N * C, 22);
  loom::kh::HostGo go;
  std::vector<float> out(N * C), out_c(N * C);
  ew::embedding_fwd(go, out.data(), tok.data(), wte.data(), wpe.data(), B, T, C);
  loom::cpu::embedding_fwd(out_c.data(), tok.data(), wte.data(), wpe.data(), B, T, C);
  CHECK(distance(out, out_c) == 0);
  std::vector<float> dwte = randn(V * C, 23), dwpe = randn(T * C, 24), dwte_c = dwte, dwpe_c = dwpe;
  ew::embedding_bwd(go, dwte.data(), dwpe.data(), dout.data(), tok.data(), B, T, C);
  loom::cpu::embedding_bwd(dwte_c.data(), dwpe_c.data(), dout.data(), tok.data(), B, T, C);
  CHECK(distance(dwte, dwte_c) < 1e-5);
  CHECK(distance(dwpe, dwpe_c) < 1e-5);
  const std::vector<float> inp = randn(N * 2 * F, 25), d = randn(N * F, 26);
  std::vector<float> s(N * F), s_c(N * F), ds(N * 2 * F), ds_c(N * 2 * F);
  ew::swiglu_fwd(go, s.data(), inp.data(), N, F);
  loom::cpu::swiglu_fwd(s_c.data(), inp.data(), N, F);
  CHECK(distance(s, s_c) < 1e-6);
  ew::swiglu_bwd(go, ds.data(), inp.data(), d.data(), N, F);
  loom::cpu::swiglu_bwd(ds_c.data(), inp.data(), d.data(), N, F);
  CHECK(distance(ds, ds_c) < 1e-6);
}

}  // namespace

TEST_CASE("CUDA embedding and SwiGLU on the CPU: forward and backward, repeated tokens") {
  check_embedding_swiglu(3, 7, 45, 11, 70);   // 4 and 6 blocks, the last partial
  check_embedding_swiglu(2, 33, 64, 5, 300);  // a vocabulary of 5: every token repeats often
}

TEST_CASE(
    "CUDA softmax cross-entropy on the CPU: loss and gradient, padded classes, an ignored row") {
  for (int64_t V : {300, 50}) {  // rows longer than a block, and shorter
    CAPTURE(V);
    const int64_t N = 5, V_real = V - 10;
    const std::vector<int32_t> targets = {3, static_cast<int32_t>(V_real - 1), -1, 0, 20};
    const std::vector<float> logits = randn(N * V, 30, 3.f);
    loom::kh::HostGo go;
    for (float dloss : {0.f, 0.2f}) {
      CAPTURE(dloss);
      std::vector<float> z = logits, z_c = logits, loss(N, -1.f), loss_c(N, -1.f);
      loom::cuda::xent::run(go, z.data(), loss.data(), targets.data(), N, V, V_real, dloss);
      loom::cpu::softmax_xent(z_c.data(), loss_c.data(), targets.data(), N, V, V_real, dloss);
      CHECK(distance(loss, loss_c) < 1e-5);
      CHECK(distance(z, z_c) < 1e-5);
      CHECK(loss[2] == 0.f);
    }
  }
}

TEST_CASE(
    "CUDA vocab-slice cross-entropy on the CPU: row max, sums, loss and gradient, a target off the "
    "slice") {
  namespace vx = loom::cuda::vocab_xent;
  for (int64_t ld : {300, 40}) {  // rows longer than a warp's stride, and barely longer
    CAPTURE(ld);
    const int64_t N = 11, cols = ld - 7, first = 100;  // this slice holds classes [100, 100 + ld)
    std::vector<int32_t> targets(N);
    for (int64_t i = 0; i < N; ++i)
      targets[i] = static_cast<int32_t>(first + (i * 37) % (cols + 20));
    targets[2] = -1, targets[3] = 5;  // ignored; held by another rank
    const std::vector<float> logits = randn(N * ld, 31, 3.f);
    loom::kh::HostGo go;
    std::vector<float> mx(N), mx_c(N), st(2 * N), st_c(2 * N);
    vx::row_max(go, mx.data(), logits.data(), N, ld, cols);
    loom::cpu::row_max(mx_c.data(), logits.data(), N, ld, cols);
    CHECK(mx == mx_c);  // a max has no rounding
    vx::xent_stats(go, st.data(), logits.data(), targets.data(), mx.data(), N, ld, cols, first);
    loom::cpu::xent_stats(st_c.data(), logits.data(), targets.data(), mx_c.data(), N, ld, cols,
                          first);
    CHECK(distance(st, st_c) < 1e-5);
    CHECK(st[N + 3] == 0.f);
    for (float dloss : {0.f, 0.2f}) {
      CAPTURE(dloss);
      std::vector<float> z = logits, z_c = logits, loss(N, -1.f), loss_c(N, -1.f);
      vx::xent_grad(go, z.data(), loss.data(), targets.data(), mx.data(), st_c.data(), N, ld, cols,
                    first, dloss);
      loom::cpu::xent_grad(z_c.data(), loss_c.data(), targets.data(), mx_c.data(), st_c.data(), N,
                           ld, cols, first, dloss);
      CHECK(distance(loss, loss_c) < 1e-6);
      CHECK(distance(z, z_c) < 1e-6);
      CHECK(loss[2] == 0.f);
    }
  }
}

namespace {

void check_rope(int64_t B, int64_t T, int64_t heads, int64_t D, int64_t pos0) {
  CAPTURE(D);
  const int64_t ld = heads * D + 8, half = D / 2;
  std::vector<float> cos(64 * half), sin(64 * half);
  for (int64_t p = 0; p < 64; ++p)
    for (int64_t i = 0; i < half; ++i)
      cos[p * half + i] = std::cos(p * 0.1f * (i + 1)),
                     sin[p * half + i] = std::sin(p * 0.1f * (i + 1));
  const std::vector<float> x = randn(B * T * ld, 40);
  loom::kh::HostGo go;
  std::vector<float> a = x, b = x;
  loom::cuda::rope::run(go, a.data(), ld, B, T, heads, D, cos.data(), sin.data(), pos0, 1.f);
  loom::cpu::rope_fwd(b.data(), ld, B, T, heads, D, cos.data(), sin.data(), pos0);
  CHECK(distance(a, b) < 1e-6);
  loom::cuda::rope::run(go, a.data(), ld, B, T, heads, D, cos.data(), sin.data(), pos0, -1.f);
  loom::cpu::rope_bwd(b.data(), ld, B, T, heads, D, cos.data(), sin.data(), pos0);
  CHECK(distance(a, b) < 1e-6);
}

}  // namespace

TEST_CASE(
    "CUDA RoPE on the CPU: forward and its inverse over strided rows, from a position offset") {
  check_rope(2, 9, 3, 16, 4);   // 432 pairs: 2 blocks, the last partial
  check_rope(1, 20, 2, 64, 0);  // 1280 pairs: 5 blocks
}
