// Every CPU kernel against finite differences (tolerance in support/gradcheck.hpp), and the tiled
// attention against the naive reference.
#include <doctest/doctest.h>

#include "ops/cpu/kernels.hpp"
#include "ops/cpu/vec_math.hpp"
#include "support/gradcheck.hpp"
#include "support/thread_counts.hpp"

using namespace loom::test;
namespace cpu = loom::cpu;

TEST_CASE("gemm matches a direct sum for every transpose combination") {
  const int64_t M = 5, N = 7, K = 3;
  auto A = randn(M * K, 1), B = randn(K * N, 2);
  for (int ta = 0; ta < 2; ++ta) {
    for (int tb = 0; tb < 2; ++tb) {
      // Lay out op(A) = A and op(B) = B in the storage each transpose expects.
      std::vector<float> As(M * K), Bs(K * N);
      for (int64_t i = 0; i < M; ++i)
        for (int64_t k = 0; k < K; ++k) As[ta ? k * M + i : i * K + k] = A[i * K + k];
      for (int64_t k = 0; k < K; ++k)
        for (int64_t j = 0; j < N; ++j) Bs[tb ? j * K + k : k * N + j] = B[k * N + j];
      std::vector<float> C(M * N, 1.f);
      cpu::gemm(ta, tb, M, N, K, 2.f, As.data(), ta ? M : K, Bs.data(), tb ? K : N, 0.5f, C.data(),
                N);
      double err = 0;
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
          double s = 0;
          for (int64_t k = 0; k < K; ++k) s += A[i * K + k] * B[k * N + j];
          err = std::max(err, std::fabs(C[i * N + j] - (2 * s + 0.5)));
        }
      CHECK(err < 1e-5);
    }
  }
}

TEST_CASE(
    "a GEMM cut into blocks matches a direct sum, with the same bits at 1, 2, 8, 16 threads") {
  // Cut along C's rows, its columns and K (its longest side), and a shape whose K oneDNN's own
  // threading would split at 8 threads.
  struct Shape {
    int64_t M, N, K;
  };
  for (const Shape s :
       {Shape{2100, 40, 30}, Shape{30, 2100, 40}, Shape{40, 30, 2100}, Shape{64, 384, 1536}}) {
    for (int ta = 0; ta < 2; ++ta) {
      for (int tb = 0; tb < 2; ++tb) {
        const auto A = randn(s.M * s.K, 31), B = randn(s.K * s.N, 32);  // stored as op() wants
        const int64_t lda = ta ? s.M : s.K, ldb = tb ? s.K : s.N;
        const auto C = at_thread_counts(s.M * s.N, 1.f, [&](float* c) {
          cpu::gemm(ta, tb, s.M, s.N, s.K, 2.f, A.data(), lda, B.data(), ldb, 0.5f, c, s.N);
        });
        double err = 0;
        for (int64_t i = 0; i < s.M; ++i)
          for (int64_t j = 0; j < s.N; ++j) {
            double sum = 0;
            for (int64_t k = 0; k < s.K; ++k)
              sum += static_cast<double>(A[ta ? k * lda + i : i * lda + k]) *
                     B[tb ? j * ldb + k : k * ldb + j];
            err = std::max(err, std::fabs(C[0][i * s.N + j] - (2 * sum + 0.5)));
          }
        INFO("M " << s.M << " N " << s.N << " K " << s.K << " ta " << ta << " tb " << tb);
        CHECK(err <
              1e-2);  // fp32 sums of up to 2100 products of size ~1; a wrong block is off by ~1
        for (size_t t = 1; t < C.size(); ++t) CHECK(C[t] == C[0]);
      }
    }
  }
}

TEST_CASE("layernorm backward matches finite differences") {
  const int64_t N = 6, C = 16;
  auto x = randn(N * C, 3), w = randn(C, 4), b = randn(C, 5), r = randn(N * C, 6);
  std::vector<float> out(N * C), mean(N), rstd(N);
  auto loss = [&] {
    cpu::layernorm_fwd(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    return dot(out, r);
  };
  loss();
  std::vector<float> dx(N * C), dw(C, 0.f), db(C, 0.f);
  cpu::layernorm_bwd(dx.data(), dw.data(), db.data(), r.data(), x.data(), w.data(), mean.data(),
                     rstd.data(), N, C);
  CHECK(grad_error(x, dx, loss) < kGradTolerance);
  CHECK(grad_error(w, dw, loss) < kGradTolerance);
  CHECK(grad_error(b, db, loss) < kGradTolerance);
}

TEST_CASE("rmsnorm backward matches finite differences") {
  const int64_t N = 5, C = 12;
  auto x = randn(N * C, 7), w = randn(C, 8), r = randn(N * C, 9);
  std::vector<float> out(N * C), rstd(N);
  auto loss = [&] {
    cpu::rmsnorm_fwd(out.data(), rstd.data(), x.data(), w.data(), N, C);
    return dot(out, r);
  };
  loss();
  std::vector<float> dx(N * C), dw(C, 0.f);
  cpu::rmsnorm_bwd(dx.data(), dw.data(), r.data(), x.data(), w.data(), rstd.data(), N, C);
  CHECK(grad_error(x, dx, loss) < kGradTolerance);
  CHECK(grad_error(w, dw, loss) < kGradTolerance);
}

TEST_CASE("gelu (tanh and exact forms) and swiglu backward match finite differences") {
  const int64_t n = 64;
  auto x = randn(n, 10, 2.f), r = randn(n, 11);
  std::vector<float> out(n), dx(n);
  auto gelu_loss = [&] {
    cpu::gelu_fwd(out.data(), x.data(), n);
    return dot(out, r);
  };
  cpu::gelu_bwd(dx.data(), x.data(), r.data(), n);
  CHECK(grad_error(x, dx, gelu_loss, 64, 1e-3f) < kGradTolerance);

  // The exact form: forward against erf in double, backward against finite differences.
  std::vector<float> exact(n), dexact(n);
  cpu::gelu_erf_fwd(exact.data(), x.data(), n);
  for (int64_t i = 0; i < n; ++i)
    CHECK(exact[i] ==
          doctest::Approx(0.5 * x[i] * (1 + std::erf(x[i] / std::sqrt(2.0)))).epsilon(1e-6));
  auto exact_loss = [&] {
    cpu::gelu_erf_fwd(out.data(), x.data(), n);
    return dot(out, r);
  };
  cpu::gelu_erf_bwd(dexact.data(), x.data(), r.data(), n);
  CHECK(grad_error(x, dexact, exact_loss, 64, 1e-3f) < kGradTolerance);

  const int64_t N = 4, F = 8;
  auto g = randn(N * 2 * F, 12), rs = randn(N * F, 13);
  std::vector<float> o(N * F), dg(N * 2 * F);
  auto swiglu_loss = [&] {
    cpu::swiglu_fwd(o.data(), g.data(), N, F);
    return dot(o, rs);
  };
  cpu::swiglu_bwd(dg.data(), g.data(), rs.data(), N, F);
  CHECK(grad_error(g, dg, swiglu_loss) < kGradTolerance);
}

TEST_CASE("embedding and bias backward match finite differences") {
  const int64_t B = 2, T = 3, C = 4, V = 5;
  std::vector<int32_t> tok = {1, 4, 1, 0, 2, 1};
  auto wte = randn(V * C, 14), wpe = randn(T * C, 15), r = randn(B * T * C, 16);
  std::vector<float> out(B * T * C);
  auto loss = [&] {
    cpu::embedding_fwd(out.data(), tok.data(), wte.data(), wpe.data(), B, T, C);
    return dot(out, r);
  };
  std::vector<float> dwte(V * C, 0.f), dwpe(T * C, 0.f);
  cpu::embedding_bwd(dwte.data(), dwpe.data(), r.data(), tok.data(), B, T, C);
  CHECK(grad_error(wte, dwte, loss) < kGradTolerance);
  CHECK(grad_error(wpe, dwpe, loss) < kGradTolerance);

  auto bias = randn(C, 17), base = randn(6 * C, 18), rb = randn(6 * C, 19);
  auto bias_loss = [&] {
    std::vector<float> y = base;
    cpu::bias_add(y.data(), bias.data(), 6, C);
    return dot(y, rb);
  };
  std::vector<float> dbias(C, 0.f);
  cpu::bias_bwd(dbias.data(), rb.data(), 6, C);
  CHECK(grad_error(bias, dbias, bias_loss) < kGradTolerance);
}

TEST_CASE("fused softmax cross-entropy: loss, gradient and padded classes") {
  const int64_t N = 4, V = 8, Vreal = 6;
  auto z = randn(N * V, 20, 2.f);
  std::vector<int32_t> tgt = {0, 5, 3, -1};
  std::vector<float> losses(N);
  auto loss = [&] {
    std::vector<float> zz = z;
    cpu::softmax_xent(zz.data(), losses.data(), tgt.data(), N, V, Vreal, 0.f);
    double s = 0;
    for (float l : losses) s += l;
    return s;
  };
  double l0 = loss();
  // Row 0 by hand: log-sum-exp over the 6 real classes minus the target logit.
  double se = 0;
  for (int j = 0; j < Vreal; ++j) se += std::exp(static_cast<double>(z[j]));
  CHECK(losses[0] == doctest::Approx(std::log(se) - z[0]).epsilon(1e-5));
  CHECK(losses[3] == 0.f);  // ignored target
  std::vector<float> g = z;
  cpu::softmax_xent(g.data(), losses.data(), tgt.data(), N, V, Vreal, 1.f);
  double l1 = 0;
  for (float l : losses) l1 += l;
  CHECK(l1 == doctest::Approx(l0).epsilon(1e-6));  // the same loss with the gradient pass
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = Vreal; j < V; ++j) CHECK(g[i * V + j] == 0.f);
  CHECK(grad_error(z, g, loss) < kGradTolerance);
}

TEST_CASE("adamw takes one bias-corrected step with decoupled weight decay") {
  std::vector<float> p = {1.f, -2.f}, g = {0.5f, -0.25f}, m = {0.f, 0.f}, v = {0.f, 0.f};
  cpu::adamw(p.data(), g.data(), m.data(), v.data(), 2, 0.1f, 0.9f, 0.999f, 1e-8f, 0.01f, 1);
  // Step 1: m_hat = g and v_hat = g^2, so the update is sign(g) (up to eps).
  CHECK(p[0] == doctest::Approx(1.f - 0.1f * (1.f + 0.01f * 1.f)).epsilon(1e-6));
  CHECK(p[1] == doctest::Approx(-2.f - 0.1f * (-1.f + 0.01f * -2.f)).epsilon(1e-6));
  CHECK(m[0] == doctest::Approx(0.05f));
  CHECK(v[1] == doctest::Approx(0.001f * 0.0625f));
}

TEST_CASE("sum of squares is exact in double and independent of thread count") {
  auto x = randn(10000, 21);
  double ref = 0;
  for (float f : x) ref += static_cast<double>(f) * f;
  cpu::set_threads(1);
  double one = cpu::sum_squares(x.data(), x.size());
  cpu::set_threads(2);
  double two = cpu::sum_squares(x.data(), x.size());
  CHECK(one == doctest::Approx(ref).epsilon(1e-12));
  CHECK(one == two);
  cpu::set_threads(0);
}

namespace {

struct AttentionCase {
  int64_t B, T, H, D;
};

void check_attention(const AttentionCase& c) {
  const int64_t C = c.H * c.D, rows = c.B * c.T;
  auto qkv = randn(rows * 3 * C, 22), dout = randn(rows * C, 23);
  std::vector<float> out(rows * C), lse(c.B * c.H * c.T), ref(rows * C),
      probs(c.B * c.H * c.T * c.T);
  cpu::attention_fwd(out.data(), lse.data(), qkv.data(), c.B, c.T, c.H, c.D);
  cpu::attention_naive_fwd(ref.data(), probs.data(), qkv.data(), c.B, c.T, c.H, c.D);
  CHECK(max_abs_diff(out, ref) < 1e-5);
  std::vector<float> dq(rows * 3 * C), dq_ref(rows * 3 * C);
  cpu::attention_bwd(dq.data(), dout.data(), qkv.data(), out.data(), lse.data(), c.B, c.T, c.H,
                     c.D);
  cpu::attention_naive_bwd(dq_ref.data(), dout.data(), qkv.data(), probs.data(), c.B, c.T, c.H,
                           c.D);
  CHECK(max_abs_diff(dq, dq_ref) < 1e-4);
}

}  // namespace

TEST_CASE("tiled attention equals the naive reference, including ragged tiles") {
  check_attention({2, 8, 2, 4});
  check_attention({1, 100, 3, 16});  // T not a multiple of either tile size
  check_attention({1, 130, 1, 64});
  check_attention({1, 600, 2, 16});  // three key tiles of up to 256, the online softmax across them
}

// Context parallelism's form: all T queries against the keys in two blocks of T / 2 at their
// positions, merged, equal the whole causal attention; backward, each block's dk and dv are the
// whole's rows and the blocks' dq add up to the whole's. T = 300 gives several 64-row tiles, a
// ragged last one, and key blocks that start inside a query tile.
TEST_CASE(
    "attention over two positioned key blocks, merged, equals the whole attention, forward and "
    "backward") {
  const int64_t T = 300, Tk = T / 2, H = 2, Hkv = 1, D = 16, ldq = H * D, ldkv = Hkv * D;
  const auto q = randn(T * ldq, 31), k = randn(T * ldkv, 32), v = randn(T * ldkv, 33),
             dout = randn(T * ldq, 34);
  std::vector<int64_t> pos(T);
  for (int64_t t = 0; t < T; ++t) pos[t] = t;
  std::vector<float> out(T * ldq), lse(H * T), part(T * ldq), part_lse(H * T), merged(T * ldq),
      merged_lse(H * T);
  cpu::attention_gqa_fwd(out.data(), lse.data(), q.data(), k.data(), v.data(), ldq, ldkv, 1, T, H,
                         Hkv, D);
  for (int64_t blk = 0; blk < 2; ++blk) {
    float* o = blk == 0 ? merged.data() : part.data();
    float* l = blk == 0 ? merged_lse.data() : part_lse.data();
    cpu::attention_block_fwd(o, l, q.data(), k.data() + blk * Tk * ldkv, v.data() + blk * Tk * ldkv,
                             ldq, ldkv, 1, T, Tk, H, Hkv, D, pos.data(), pos.data() + blk * Tk);
  }
  cpu::attention_merge(merged.data(), merged_lse.data(), part.data(), part_lse.data(), 1, T, H, D);
  CHECK(max_abs_diff(merged, out) < 1e-5);
  CHECK(max_abs_diff(merged_lse, lse) < 1e-5);
  std::vector<float> dq(T * ldq), dk(T * ldkv), dv(T * ldkv), dq_sum(T * ldq, 0.f),
      dk_blk(T * ldkv), dv_blk(T * ldkv);
  cpu::attention_gqa_bwd(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(),
                         out.data(), lse.data(), ldq, ldkv, 1, T, H, Hkv, D);
  for (int64_t blk = 0; blk < 2; ++blk) {
    std::vector<float> dq_part(T * ldq);
    cpu::attention_block_bwd(
        dq_part.data(), dk_blk.data() + blk * Tk * ldkv, dv_blk.data() + blk * Tk * ldkv,
        dout.data(), q.data(), k.data() + blk * Tk * ldkv, v.data() + blk * Tk * ldkv, out.data(),
        lse.data(), ldq, ldkv, 1, T, Tk, H, Hkv, D, pos.data(), pos.data() + blk * Tk);
    for (int64_t i = 0; i < T * ldq; ++i) dq_sum[i] += dq_part[i];
  }
  CHECK(max_abs_diff(dq_sum, dq) < 1e-4);
  CHECK(max_abs_diff(dk_blk, dk) < 1e-4);
  CHECK(max_abs_diff(dv_blk, dv) < 1e-4);
}

// A key block that reaches past the last query's position (context parallelism's zig-zag halves
// do): the keys no query sees get zero gradients, and the rest is the attention over the keys
// seen. 100 queries (a ragged last tile) over 300 keys spans two key tiles, the second unseen.
TEST_CASE("attention over keys past every query: the unseen keys get zero gradients") {
  const int64_t Tq = 100, Tk = 300, H = 2, Hkv = 1, D = 16, ldq = H * D, ldkv = Hkv * D;
  const auto q = randn(Tq * ldq, 41), k = randn(Tk * ldkv, 42), v = randn(Tk * ldkv, 43),
             dout = randn(Tq * ldq, 44);
  std::vector<int64_t> pos(Tk);
  for (int64_t t = 0; t < Tk; ++t) pos[t] = t;
  std::vector<float> out(Tq * ldq), lse(H * Tq), whole(Tq * ldq), whole_lse(H * Tq);
  cpu::attention_block_fwd(out.data(), lse.data(), q.data(), k.data(), v.data(), ldq, ldkv, 1, Tq,
                           Tk, H, Hkv, D, pos.data(), pos.data());
  cpu::attention_gqa_fwd(whole.data(), whole_lse.data(), q.data(), k.data(), v.data(), ldq, ldkv, 1,
                         Tq, H, Hkv, D);
  CHECK(max_abs_diff(out, whole) < 1e-5);
  std::vector<float> dq(Tq * ldq), dk(Tk * ldkv, 1.f), dv(Tk * ldkv, 1.f), dq_whole(Tq * ldq),
      dk_whole(Tq * ldkv), dv_whole(Tq * ldkv);
  cpu::attention_block_bwd(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(),
                           v.data(), out.data(), lse.data(), ldq, ldkv, 1, Tq, Tk, H, Hkv, D,
                           pos.data(), pos.data());
  cpu::attention_gqa_bwd(dq_whole.data(), dk_whole.data(), dv_whole.data(), dout.data(), q.data(),
                         k.data(), v.data(), whole.data(), whole_lse.data(), ldq, ldkv, 1, Tq, H,
                         Hkv, D);
  CHECK(max_abs_diff(dq, dq_whole) < 1e-4);
  CHECK(max_abs_diff(std::vector<float>(dk.begin(), dk.begin() + Tq * ldkv), dk_whole) < 1e-4);
  CHECK(max_abs_diff(std::vector<float>(dv.begin(), dv.begin() + Tq * ldkv), dv_whole) < 1e-4);
  for (int64_t i = Tq * ldkv; i < Tk * ldkv; ++i) {
    REQUIRE(dk[i] == 0.f);
    REQUIRE(dv[i] == 0.f);
  }
}

TEST_CASE("attention backward matches finite differences") {
  const int64_t B = 1, T = 5, H = 2, D = 3, C = H * D;
  auto qkv = randn(B * T * 3 * C, 24), r = randn(B * T * C, 25);
  std::vector<float> out(B * T * C), lse(B * H * T);
  auto loss = [&] {
    cpu::attention_fwd(out.data(), lse.data(), qkv.data(), B, T, H, D);
    return dot(out, r);
  };
  loss();
  std::vector<float> dqkv(B * T * 3 * C);
  cpu::attention_bwd(dqkv.data(), r.data(), qkv.data(), out.data(), lse.data(), B, T, H, D);
  CHECK(grad_error(qkv, dqkv, loss, 90) < kGradTolerance);
}

TEST_CASE("vectorisable exp and tanh are accurate to fp32 rounding") {
  double worst_exp = 0, worst_tanh = 0;
  for (float x = -80.f; x < 80.f; x += 0.0137f) {
    worst_exp = std::max(worst_exp, std::fabs(cpu::exp_fast(x) / std::exp(double(x)) - 1));
    worst_tanh = std::max(worst_tanh, std::fabs(cpu::tanh_fast(x / 8) - std::tanh(double(x / 8))));
  }
  CHECK(worst_exp < 5e-7);
  CHECK(worst_tanh < 5e-7);
  CHECK(cpu::exp_fast(-100.f) == 0.f);
  CHECK(cpu::exp_fast(-INFINITY) == 0.f);
  CHECK(std::isnan(cpu::exp_fast(NAN)));
  CHECK(cpu::tanh_fast(50.f) == 1.f);
  CHECK(cpu::tanh_fast(-50.f) == -1.f);
}
