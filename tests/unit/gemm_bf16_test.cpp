// bf16 GEMM operands on the CPU (the runtime's op table, tensor/ops_v2.h): quantize_into stores
// quantize's values in 16 bits, and gemm_typed on bf16 operands equals the fp32 GEMM of the same
// values up to the order of its additions, with the same bits at any thread count. On a CPU without
// bf16 instructions gemm_typed widens the operands and the checks hold trivially; the INFO line
// says which ran.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "ops/cpu/kernels.hpp"
#include "support/gradcheck.hpp"
#include "support/thread_counts.hpp"

using namespace loom::test;
namespace cpu = loom::cpu;

namespace {

std::vector<uint16_t> to_bf16(const std::vector<float>& x) {
  std::vector<uint16_t> h(x.size());
  cpu::to_bf16(h.data(), x.data(), static_cast<int64_t>(x.size()));
  return h;
}

std::vector<float> widened(const std::vector<uint16_t>& h) {
  std::vector<float> x(h.size());
  cpu::from_bf16(x.data(), h.data(), static_cast<int64_t>(h.size()));
  return x;
}

const char* instructions() {
  const char* isa = cpu::bf16_instructions();
  return isa ? isa : "none: widened to fp32";
}

struct Shape {
  int64_t M, N, K;
};

// f(shape, ta, tb) for every transpose pair of a serial GEMM, and ones cut along C's rows, its
// columns and along K, then `last`.
template <class F>
void each_case(const Shape& last, F&& f) {
  for (const Shape s :
       {Shape{5, 7, 3}, Shape{2100, 40, 30}, Shape{30, 2100, 40}, Shape{40, 30, 2100}, last})
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) f(s, ta, tb);
}

}  // namespace

TEST_CASE("quantize_into keeps quantize's bf16 values, amax and clip count in 16 bits") {
  for (const int64_t n : {int64_t{7}, int64_t{70000}}) {  // serial, and past the parallel cut
    std::vector<float> x = randn(n, 41);
    x[0] = 1.f + std::ldexp(1.f, -8);  // a tie: rounds to even (1)
    x[1] = 3.4e38f;                    // past bf16's largest finite value: overflows, clipped
    x[2] = -std::numeric_limits<float>::infinity();  // inf stays inf, not clipped
    x[3] = 1e-40f;                                   // an fp32 subnormal
    x[4] = -0.f;
    if (n > 7) x[n / 2] = 7.5e3f;  // the amax
    for (const float scale : {1.f, 2.f}) {
      std::vector<float> emulated = x;
      float amax_e = 0, amax_n = 0;
      int64_t clipped_e = 0, clipped_n = 0;
      cpu::quantize(emulated.data(), n, LOOM_BF16, scale, &amax_e, &clipped_e);
      // Without the counts (a policy that does not observe) quantize runs another loop, with the
      // same bits.
      std::vector<float> uncounted = x;
      cpu::quantize(uncounted.data(), n, LOOM_BF16, scale, nullptr, nullptr);
      CHECK(std::memcmp(uncounted.data(), emulated.data(), 4 * emulated.size()) == 0);
      std::vector<uint16_t> narrow(n);
      cpu::quantize_into(narrow.data(), LOOM_BF16, x.data(), n, scale, &amax_n, &clipped_n);
      const std::vector<float> got = widened(narrow);
      int64_t differ = 0;
      for (int64_t i = 0; i < n; ++i)  // a power-of-two scale divides back out exactly
        differ += std::bit_cast<uint32_t>(got[i] / scale) != std::bit_cast<uint32_t>(emulated[i]);
      INFO("n " << n << " scale " << scale);
      CHECK(differ == 0);
      CHECK(amax_n == amax_e);
      CHECK(clipped_n == clipped_e);
      CHECK(clipped_n == 1);
    }
    x[5] = std::numeric_limits<float>::quiet_NaN();
    std::vector<uint16_t> narrow(n);
    float amax = 0;
    cpu::quantize_into(narrow.data(), LOOM_BF16, x.data(), n, 1.f, &amax, nullptr);
    CHECK(std::isnan(amax));  // a poisoned operand is seen
    CHECK(std::isnan(widened(narrow)[5]));
    // Without amax and the clip count (a policy that does not observe) the loop is another, with
    // the same bits: the tie, the overflow, inf, the subnormal, -0 and the NaN above.
    std::vector<uint16_t> unobserved(n);
    cpu::quantize_into(unobserved.data(), LOOM_BF16, x.data(), n, 1.f, nullptr, nullptr);
    CHECK(unobserved == narrow);
  }
}

TEST_CASE(
    "gemm_typed on bf16 operands is the fp32 GEMM of the same values up to summation order, "
    "with the same bits at 1, 2, 8, 16 threads") {
  INFO("bf16 instructions: " << instructions());
  each_case(Shape{64, 384, 1536}, [](const Shape& s, int ta, int tb) {
    const auto A16 = to_bf16(randn(s.M * s.K, 51)), B16 = to_bf16(randn(s.K * s.N, 52));
    const auto A = widened(A16), B = widened(B16);
    const int64_t lda = ta ? s.M : s.K, ldb = tb ? s.K : s.N;
    std::vector<float> want(s.M * s.N, 1.f);
    cpu::gemm(ta, tb, s.M, s.N, s.K, 2.f, A.data(), lda, B.data(), ldb, 0.5f, want.data(), s.N);
    const auto C = at_thread_counts(s.M * s.N, 1.f, [&](float* c) {
      cpu::gemm_typed(ta, tb, s.M, s.N, s.K, 2.f, A16.data(), LOOM_BF16, lda, B16.data(), LOOM_BF16,
                      ldb, 0.5f, c, s.N);
    });
    // Each sum's rounding is at most K ulps of sum |a b|; a wrong tile is off by ~1.
    double err = 0;
    for (int64_t i = 0; i < s.M; ++i)
      for (int64_t j = 0; j < s.N; ++j) {
        double mag = 0;
        for (int64_t k = 0; k < s.K; ++k)
          mag += std::fabs(A[ta ? k * lda + i : i * lda + k] * B[tb ? j * ldb + k : k * ldb + j]);
        const double bound = 2 * mag * s.K * 6e-8 + 1e-6;
        err = std::max(err, std::fabs(C[0][i * s.N + j] - want[i * s.N + j]) / bound);
      }
    INFO("M " << s.M << " N " << s.N << " K " << s.K << " ta " << ta << " tb " << tb);
    CHECK(err <= 1.0);
    for (size_t t = 1; t < C.size(); ++t) CHECK(C[t] == C[0]);
  });
}

TEST_CASE("gemm_typed widens an fp32 operand's partner: mixed operands give fp32's GEMM exactly") {
  const int64_t M = 33, N = 17, K = 65;
  const auto A = randn(M * K, 61);
  const auto B16 = to_bf16(randn(K * N, 62));
  const auto B = widened(B16);
  std::vector<float> want(M * N, 0.f), got(M * N, 0.f);
  cpu::gemm(0, 0, M, N, K, 1.f, A.data(), K, B.data(), N, 0.f, want.data(), N);
  cpu::gemm_typed(0, 0, M, N, K, 1.f, A.data(), LOOM_F32, K, B16.data(), LOOM_BF16, N, 0.f,
                  got.data(), N);
  CHECK(got == want);
  CHECK_THROWS(cpu::gemm_typed(0, 0, M, N, K, 1.f, A.data(), LOOM_FP8_E4M3, K, B16.data(),
                               LOOM_BF16, N, 0.f, got.data(), N));
}

TEST_CASE(
    "gemm_widening (a CPU without bf16 instructions) gives fp32 gemm's bits on the widened "
    "operands, strided ones too, at 1, 2, 8, 16 threads") {
  // The last with rows padded past their width (a view of a wider tensor).
  each_case(Shape{2048, 1152, 384}, [](const Shape& s, int ta, int tb) {
    const int64_t pad = s.M == 2048 ? 3 : 0;
    const int64_t lda = (ta ? s.M : s.K) + pad, ldb = (tb ? s.K : s.N) + pad;
    const auto A16 = to_bf16(randn((ta ? s.K : s.M) * lda, 71)),
               B16 = to_bf16(randn((tb ? s.N : s.K) * ldb, 72));
    const auto A = widened(A16), B = widened(B16);
    std::vector<float> want(s.M * s.N, 1.f);
    cpu::gemm(ta, tb, s.M, s.N, s.K, 2.f, A.data(), lda, B.data(), ldb, 0.5f, want.data(), s.N);
    const auto C = at_thread_counts(s.M * s.N, 1.f, [&](float* c) {
      cpu::gemm_widening(ta, tb, s.M, s.N, s.K, 2.f, A16.data(), lda, B16.data(), ldb, 0.5f, c,
                         s.N);
    });
    INFO("M " << s.M << " N " << s.N << " K " << s.K << " ta " << ta << " tb " << tb);
    for (const auto& got : C) CHECK(got == want);
  });
}
