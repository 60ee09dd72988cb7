// ABI 3's typed op table (ops/typed_ops.hpp) over the CPU's and the strict device's ABI 2
// tables: each entry gives the ABI 2 kernel's bits for fp32 arguments and for the bf16 ones its
// mask admits, and a dtype outside the mask stops the process naming the entry.
#include "ops/typed_ops.hpp"

#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstring>
#include <loom/bf16.hpp>
#include <string>
#include <vector>

#include "ops/ops.hpp"
#include "support/gradcheck.hpp"

namespace {

using loom::test::randn;

loom_ref ref(std::vector<float>& v) { return {v.data(), LOOM_F32, 0}; }
loom_cref cref(const std::vector<float>& v) { return {v.data(), LOOM_F32, 0}; }

// What a child process printed to stderr before it died, and how it died.
std::string child_stderr(void (*body)(), int& signal) {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    dup2(fds[1], 2);
    close(fds[0]);
    body();
    _exit(0);
  }
  close(fds[1]);
  std::string out;
  char buf[512];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  return out;
}

}  // namespace

TEST_CASE("the typed table is ABI 3.0's, with fp32 everywhere and bf16 where ABI 2 has kernels") {
  for (const loom_ops_v2* inner : {loom::ops::cpu(), loom::ops::for_device("strict")}) {
    const loom_ops* t = loom::ops::typed(inner);
    REQUIRE(t);
    CHECK(t == loom::ops::typed(inner));  // one table per device, kept
    CHECK(t->v.major == 3);
    CHECK(t->v.size == sizeof(loom_ops));
    CHECK(t->device.kind == inner->device.kind);
    CHECK(t->host_reachable == inner->host_reachable);
    CHECK(t->gemm_native_dtypes == inner->gemm_operand_dtypes);
    for (int op = 0; op < LOOM_OP_COUNT; ++op) CHECK((t->dtypes[op] & (1u << LOOM_F32)) != 0);
    CHECK((t->dtypes[LOOM_OP_GEMM] & (1u << LOOM_BF16)) != 0);
    CHECK((t->dtypes[LOOM_OP_CONVERT] & (1u << LOOM_BF16)) != 0);
    CHECK((t->dtypes[LOOM_OP_XENT] & (1u << LOOM_BF16)) == 0);  // no bf16 logits yet
    // bf16 norm, bias, element-wise, activation and attention forms run on the host: the CPU's,
    // not strict's
    const bool host = inner->host_reachable != 0;
    CHECK(((t->dtypes[LOOM_OP_NORM] & (1u << LOOM_BF16)) != 0) == host);
    CHECK(((t->dtypes[LOOM_OP_BIAS] & (1u << LOOM_BF16)) != 0) == host);
    CHECK(((t->dtypes[LOOM_OP_ELEMENTWISE] & (1u << LOOM_BF16)) != 0) == host);
    CHECK(((t->dtypes[LOOM_OP_ACTIVATION] & (1u << LOOM_BF16)) != 0) == host);
    CHECK(((t->dtypes[LOOM_OP_ATTENTION] & (1u << LOOM_BF16)) != 0) == host);
    // Every entry from copy on is a function pointer, and every one is set: an entry added to
    // loom_ops and forgotten where the table is built fails here.
    const auto* first = reinterpret_cast<const char*>(&t->copy);
    const auto* end = reinterpret_cast<const char*>(t) + sizeof(loom_ops);
    for (const char* p = first; p < end; p += sizeof(void*)) {
      void* entry = nullptr;
      std::memcpy(&entry, p, sizeof entry);
      INFO("entry at byte " << p - reinterpret_cast<const char*>(t));
      CHECK(entry != nullptr);
    }
  }
}

TEST_CASE("typed entries give the ABI 2 kernels' bits") {
  const loom_ops_v2* in = loom::ops::cpu();
  const loom_ops* t = loom::ops::typed(in);
  const int64_t N = 8, C = 32;
  const std::vector<float> x = randn(N * C, 1), w = randn(C, 2), b = randn(C, 3);
  std::vector<float> out(N * C), mean(N), rstd(N), want(N * C), wmean(N), wrstd(N);
  t->layernorm_fwd(ref(out), mean.data(), rstd.data(), cref(x), w.data(), b.data(), N, C, 1e-6f);
  in->layernorm_fwd_eps(want.data(), wmean.data(), wrstd.data(), x.data(), w.data(), b.data(), N, C,
                        1e-6f);
  CHECK(out == want);
  CHECK(rstd == wrstd);

  // gemm: fp32 operands, then bf16 ones (convert's rounding) against gemm_typed.
  const std::vector<float> a = randn(N * C, 4), bm = randn(C * N, 5);
  std::vector<float> c(N * N), cw(N * N);
  t->gemm(0, 0, N, N, C, 1.f, cref(a), C, cref(bm), N, 0.f, ref(c), N);
  in->gemm(0, 0, N, N, C, 1.f, a.data(), C, bm.data(), N, 0.f, cw.data(), N);
  CHECK(c == cw);
  std::vector<uint16_t> a16(a.size()), b16(bm.size());
  t->convert({a16.data(), LOOM_BF16, 0}, cref(a), N * C, 1.f, nullptr, nullptr);
  t->convert({b16.data(), LOOM_BF16, 0}, cref(bm), C * N, 1.f, nullptr, nullptr);
  t->gemm(0, 0, N, N, C, 1.f, {a16.data(), LOOM_BF16, 0}, C, {b16.data(), LOOM_BF16, 0}, N, 0.f,
          ref(c), N);
  in->gemm_typed(0, 0, N, N, C, 1.f, a16.data(), LOOM_BF16, C, b16.data(), LOOM_BF16, N, 0.f,
                 cw.data(), N);
  CHECK(c == cw);
  // convert back: bf16 widens exactly to what quantize leaves in fp32
  std::vector<float> back(a.size()), q = a;
  t->convert(ref(back), {a16.data(), LOOM_BF16, 0}, N * C, 1.f, nullptr, nullptr);
  float amax = 0;
  int64_t clipped = 0;
  t->quantize(q.data(), N * C, LOOM_BF16, 1.f, &amax, &clipped);
  CHECK(back == q);

  // adamw and sum_squares take lists: one tensor of each equals ABI 2's single calls
  std::vector<float> p = randn(64, 6), g = randn(64, 7), m(64), v(64), p2 = p, m2(64), v2(64);
  float* ps[] = {p.data()};
  const float* gs[] = {g.data()};
  float* ms[] = {m.data()};
  float* vs[] = {v.data()};
  const int64_t n[] = {64};
  const float wd[] = {0.1f};
  t->adamw(1, ps, gs, ms, vs, n, wd, 1e-3f, 0.9f, 0.95f, 1e-8f, 3);
  in->adamw(p2.data(), g.data(), m2.data(), v2.data(), 64, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 3);
  CHECK(p == p2);
  CHECK(v == v2);
  CHECK(m == m2);
  const loom_cref xs[] = {cref(g)};
  double ss = 0;
  t->sum_squares(1, xs, n, &ss);
  CHECK(ss == in->sum_squares(g.data(), 64));
}

// bf16 storage of values, and the values it holds.
std::vector<uint16_t> to_bf16(const std::vector<float>& x) {
  std::vector<uint16_t> h(x.size());
  for (size_t i = 0; i < x.size(); ++i) h[i] = loom::sdk::f32_to_bf16(x[i]);
  return h;
}
std::vector<float> widen(const std::vector<uint16_t>& h) {
  std::vector<float> x(h.size());
  for (size_t i = 0; i < h.size(); ++i) x[i] = loom::sdk::bf16_to_f32(h[i]);
  return x;
}

TEST_CASE(
    "the CPU's bf16 element-wise and activation entries are the fp32 kernels on the widened "
    "values, each output rounded once") {
  const loom_ops_v2* in = loom::ops::cpu();
  const loom_ops* t = loom::ops::typed(in);
  const int64_t N = 4, F = 24, n = N * F;
  const std::vector<uint16_t> a16 = to_bf16(randn(n, 11)), b16 = to_bf16(randn(n, 12)),
                              g16 = to_bf16(randn(2 * n, 13));
  const std::vector<float> a = widen(a16), b = widen(b16), g = widen(g16);
  auto ref16 = [](std::vector<uint16_t>& h) { return loom_ref{h.data(), LOOM_BF16, 0}; };
  auto cref16 = [](const std::vector<uint16_t>& h) { return loom_cref{h.data(), LOOM_BF16, 0}; };

  std::vector<uint16_t> y16(n);
  std::vector<float> want(n);
  t->add(ref16(y16), cref16(a16), cref(b), n);  // mixed: a bf16, b fp32
  in->add(want.data(), a.data(), b.data(), n);
  CHECK(y16 == to_bf16(want));

  y16 = a16;
  want = a;
  t->accumulate(ref16(y16), cref16(b16), n);
  in->accumulate(want.data(), b.data(), n);
  CHECK(y16 == to_bf16(want));
  t->scale(ref16(y16), 0.37f, n);
  std::vector<float> again = widen(to_bf16(want));
  in->scale(again.data(), 0.37f, n);
  CHECK(y16 == to_bf16(again));

  t->gelu_fwd(ref16(y16), cref16(a16), n);
  in->gelu_fwd(want.data(), a.data(), n);
  CHECK(y16 == to_bf16(want));
  t->gelu_bwd(ref16(y16), cref16(a16), cref16(b16), n);
  in->gelu_bwd(want.data(), a.data(), b.data(), n);
  CHECK(y16 == to_bf16(want));
  t->swiglu_fwd(ref16(y16), cref16(g16), N, F);
  in->swiglu_fwd(want.data(), g.data(), N, F);
  CHECK(y16 == to_bf16(want));
  std::vector<uint16_t> dg16(2 * n);
  std::vector<float> dg(2 * n);
  t->swiglu_bwd(ref16(dg16), cref16(g16), cref16(b16), N, F);
  in->swiglu_bwd(dg.data(), g.data(), b.data(), N, F);
  CHECK(dg16 == to_bf16(dg));

  const loom_cref xs[] = {cref16(a16), cref(b)};
  const int64_t ns[] = {n, n};
  double ss[2] = {0, 0};
  t->sum_squares(2, xs, ns, ss);
  CHECK(ss[0] == in->sum_squares(a.data(), n));
  CHECK(ss[1] == in->sum_squares(b.data(), n));
}

TEST_CASE(
    "the CPU's activations read and write bf16 storage themselves: mixed dtypes, every kind, the "
    "bits of widening, the fp32 kernel and one rounding") {
  const loom_ops_v2* in = loom::ops::cpu();
  const loom_ops* t = loom::ops::typed(in);
  const int64_t N = 37, F = 129, n = N * F;  // odd sizes: the vector loops' remainders too
  const std::vector<uint16_t> x16 = to_bf16(randn(2 * n, 21)), d16 = to_bf16(randn(n, 22));
  const std::vector<float> x = widen(x16), d = widen(d16);
  auto ref16 = [](std::vector<uint16_t>& h) { return loom_ref{h.data(), LOOM_BF16, 0}; };
  auto cref16 = [](const std::vector<uint16_t>& h) { return loom_cref{h.data(), LOOM_BF16, 0}; };
  auto reff = [](std::vector<float>& h) { return loom_ref{h.data(), LOOM_F32, 0}; };
  using Fwd = void (*)(loom_ref, loom_cref, int64_t);
  using Bwd = void (*)(loom_ref, loom_cref, loom_cref, int64_t);
  using Fwd2 = void (*)(float*, const float*, int64_t);
  using Bwd2 = void (*)(float*, const float*, const float*, int64_t);
  const struct {
    const char* name;
    Fwd fwd;
    Bwd bwd;
    Fwd2 fwd2;
    Bwd2 bwd2;
  } kinds[] = {{"gelu", t->gelu_fwd, t->gelu_bwd, in->gelu_fwd, in->gelu_bwd},
               {"gelu_erf", t->gelu_erf_fwd, t->gelu_erf_bwd, in->gelu_erf_fwd, in->gelu_erf_bwd}};
  for (const auto& k : kinds) {
    INFO(k.name);
    std::vector<float> want(n), got(n);
    std::vector<uint16_t> got16(n);
    k.fwd2(want.data(), x.data(), n);
    k.fwd(reff(got), cref16(x16), n);  // bf16 in, fp32 out: no rounding
    CHECK(got == want);
    k.fwd(ref16(got16), cref16(x16), n);
    CHECK(got16 == to_bf16(want));
    k.bwd2(want.data(), x.data(), d.data(), n);
    k.bwd(reff(got), cref16(x16), cref(d), n);  // the model's backward: fc bf16, the rest fp32
    CHECK(got == want);
  }
  std::vector<float> want(2 * n), got(2 * n);
  std::vector<uint16_t> got16(n);
  in->swiglu_fwd(want.data(), x.data(), N, F);
  t->swiglu_fwd(ref16(got16), cref16(x16), N, F);
  CHECK(got16 == to_bf16(std::vector<float>(want.begin(), want.begin() + n)));
  in->swiglu_bwd(want.data(), x.data(), d.data(), N, F);
  t->swiglu_bwd(reff(got), cref16(x16), cref(d), N, F);
  CHECK(got == want);
}

TEST_CASE(
    "the CPU's attention reads bf16 q, k and v as they are stored: the fp32 kernel's bits on "
    "their values, fused and grouped-query layouts, bf16 outputs and gradients rounded once") {
  const loom_ops_v2* in = loom::ops::cpu();
  const loom_ops* t = loom::ops::typed(in);
  const int64_t B = 2, T = 80, D = 16;  // T: a query tile and part of another
  for (const auto [H, Hkv] : {std::pair<int64_t, int64_t>{2, 2}, {4, 2}}) {
    INFO("H " << H << ", Hkv " << Hkv);
    // Multi-head: one fused [q | k | v] row; grouped-query: q rows, then [k | v] rows.
    const bool fused = H == Hkv;
    const int64_t ldq = fused ? 3 * H * D : H * D, ldkv = fused ? ldq : 2 * Hkv * D;
    const int64_t nq = B * T * ldq, nkv = fused ? 0 : B * T * ldkv;
    const std::vector<uint16_t> x16 = to_bf16(randn(nq + nkv, 31)),
                                dy16 = to_bf16(randn(B * T * H * D, 32));
    const std::vector<float> x = widen(x16), dy = widen(dy16);
    const int64_t k_at = fused ? H * D : nq, v_at = fused ? 2 * H * D : nq + Hkv * D;
    auto c16 = [&](int64_t at) { return loom_cref{x16.data() + at, LOOM_BF16, 0}; };
    std::vector<float> out(B * T * H * D), lse(B * H * T), want(out.size()), want_lse(lse.size());
    in->attention_gqa_fwd(want.data(), want_lse.data(), x.data(), x.data() + k_at, x.data() + v_at,
                          ldq, ldkv, B, T, H, Hkv, D);
    t->attention_fwd(loom_ref{out.data(), LOOM_F32, 0}, lse.data(), c16(0), c16(k_at), c16(v_at),
                     ldq, ldkv, B, T, H, Hkv, D);
    CHECK(out == want);
    CHECK(lse == want_lse);
    std::vector<uint16_t> out16(out.size());
    t->attention_fwd(loom_ref{out16.data(), LOOM_BF16, 0}, lse.data(), c16(0), c16(k_at), c16(v_at),
                     ldq, ldkv, B, T, H, Hkv, D);
    CHECK(out16 == to_bf16(want));

    std::vector<float> g(x.size(), 7.f), want_g(x.size(), 7.f);  // 7: what lies between stays
    in->attention_gqa_bwd(want_g.data(), want_g.data() + k_at, want_g.data() + v_at, dy.data(),
                          x.data(), x.data() + k_at, x.data() + v_at, want.data(), want_lse.data(),
                          ldq, ldkv, B, T, H, Hkv, D);
    auto r32 = [&](int64_t at) { return loom_ref{g.data() + at, LOOM_F32, 0}; };
    t->attention_bwd(r32(0), r32(k_at), r32(v_at), loom_cref{dy.data(), LOOM_F32, 0}, c16(0),
                     c16(k_at), c16(v_at), loom_cref{want.data(), LOOM_F32, 0}, want_lse.data(),
                     ldq, ldkv, B, T, H, Hkv, D);
    CHECK(g == want_g);
    // bf16 gradients, rounded once each, every tensor's own columns only: a fused row
    // interleaves dq, dk and dv.
    std::vector<uint16_t> g16 = to_bf16(std::vector<float>(x.size(), 7.f));
    auto r16 = [&](int64_t at) { return loom_ref{g16.data() + at, LOOM_BF16, 0}; };
    t->attention_bwd(r16(0), r16(k_at), r16(v_at), loom_cref{dy.data(), LOOM_F32, 0}, c16(0),
                     c16(k_at), c16(v_at), loom_cref{want.data(), LOOM_F32, 0}, want_lse.data(),
                     ldq, ldkv, B, T, H, Hkv, D);
    CHECK(g16 == to_bf16(want_g));
  }
}

namespace {

// The CPU's table with its norm and bias kernels behind wrappers: a host-reachable device whose
// kernels are not the CPU's own, so its typed table widens bf16 tensors into fp32 copies.
const loom_ops_v2* wrapped_cpu() {
  static const loom_ops_v2 t = [] {
    loom_ops_v2 w = *loom::ops::cpu();
    w.layernorm_fwd_eps = [](float* o, float* m, float* r, const float* x, const float* g,
                             const float* b, int64_t N, int64_t C, float eps) {
      loom::ops::cpu()->layernorm_fwd_eps(o, m, r, x, g, b, N, C, eps);
    };
    w.layernorm_bwd = [](float* dx, float* dw, float* db, const float* dy, const float* x,
                         const float* g, const float* m, const float* r, int64_t N, int64_t C) {
      loom::ops::cpu()->layernorm_bwd(dx, dw, db, dy, x, g, m, r, N, C);
    };
    w.rmsnorm_fwd_eps = [](float* o, float* r, const float* x, const float* g, int64_t N, int64_t C,
                           float eps) { loom::ops::cpu()->rmsnorm_fwd_eps(o, r, x, g, N, C, eps); };
    w.rmsnorm_bwd = [](float* dx, float* dw, const float* dy, const float* x, const float* g,
                       const float* r, int64_t N,
                       int64_t C) { loom::ops::cpu()->rmsnorm_bwd(dx, dw, dy, x, g, r, N, C); };
    w.bias_add = [](float* o, const float* b, int64_t N, int64_t C) {
      loom::ops::cpu()->bias_add(o, b, N, C);
    };
    w.bias_bwd = [](float* db, const float* dy, int64_t N, int64_t C) {
      loom::ops::cpu()->bias_bwd(db, dy, N, C);
    };
    return w;
  }();
  return &t;
}

}  // namespace

TEST_CASE(
    "bf16 norms and bias give the fp32 kernels' bits on the widened values, each output rounded "
    "once: the CPU's own kernels reading and writing 16 bits, and another host table's widened "
    "copies") {
  const loom_ops_v2* in = loom::ops::cpu();
  const int64_t N = 37, C = 44;  // C: a vector of 8 lanes and a remainder
  const int64_t n = N * C;
  std::vector<float> x0 = randn(n, 41);
  for (float& v : x0) v = 3.f + 2.f * v;  // a mean far from 0, as a residual stream has
  const std::vector<uint16_t> x16 = to_bf16(x0), d16 = to_bf16(randn(n, 42));
  const std::vector<float> x = widen(x16), d = widen(d16), w = randn(C, 43), b = randn(C, 44);
  auto ref16 = [](std::vector<uint16_t>& h) { return loom_ref{h.data(), LOOM_BF16, 0}; };
  auto cref16 = [](const std::vector<uint16_t>& h) { return loom_cref{h.data(), LOOM_BF16, 0}; };
  for (const loom_ops_v2* table : {in, wrapped_cpu()}) {
    INFO((table == in ? "the CPU's table" : "a wrapped one"));
    const loom_ops* t = loom::ops::typed(table);
    for (const bool rms : {false, true}) {
      INFO((rms ? "rmsnorm" : "layernorm"));
      std::vector<float> want(n), mean(N), rstd(N), got_mean(N), got_rstd(N);
      std::vector<uint16_t> got16(n);
      if (!rms) {
        in->layernorm_fwd_eps(want.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(),
                              N, C, 1e-5f);
        t->layernorm_fwd(ref16(got16), got_mean.data(), got_rstd.data(), cref16(x16), w.data(),
                         b.data(), N, C, 1e-5f);
        CHECK(got_mean == mean);
      } else {
        in->rmsnorm_fwd_eps(want.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f);
        t->rmsnorm_fwd(ref16(got16), got_rstd.data(), cref16(x16), w.data(), N, C, 1e-5f);
      }
      CHECK(got_rstd == rstd);
      CHECK(got16 == to_bf16(want));
      // The model's forward: the residual stream fp32 in, the output bf16.
      std::fill(got16.begin(), got16.end(), 0);
      if (!rms)
        t->layernorm_fwd(ref16(got16), got_mean.data(), got_rstd.data(), cref(x), w.data(),
                         b.data(), N, C, 1e-5f);
      else
        t->rmsnorm_fwd(ref16(got16), got_rstd.data(), cref(x), w.data(), N, C, 1e-5f);
      CHECK(got16 == to_bf16(want));
      // bf16 input and output gradient, fp32 input gradient
      std::vector<float> dx(n), want_dx(n), dw(C, 0.5f), want_dw(C, 0.5f), db(C, 0.25f),
          want_db(C, 0.25f);
      if (!rms) {
        in->layernorm_bwd(want_dx.data(), want_dw.data(), want_db.data(), d.data(), x.data(),
                          w.data(), mean.data(), rstd.data(), N, C);
        t->layernorm_bwd(loom_ref{dx.data(), LOOM_F32, 0}, dw.data(), db.data(), cref16(d16),
                         cref16(x16), w.data(), mean.data(), rstd.data(), N, C);
        CHECK(db == want_db);
      } else {
        in->rmsnorm_bwd(want_dx.data(), want_dw.data(), d.data(), x.data(), w.data(), rstd.data(),
                        N, C);
        t->rmsnorm_bwd(loom_ref{dx.data(), LOOM_F32, 0}, dw.data(), cref16(d16), cref16(x16),
                       w.data(), rstd.data(), N, C);
      }
      CHECK(dx == want_dx);
      CHECK(dw == want_dw);
      // A bf16 input gradient: the same values, rounded once.
      std::vector<uint16_t> dx16(n);
      if (!rms)
        t->layernorm_bwd(ref16(dx16), dw.data(), db.data(), cref16(d16), cref16(x16), w.data(),
                         mean.data(), rstd.data(), N, C);
      else
        t->rmsnorm_bwd(ref16(dx16), dw.data(), cref16(d16), cref16(x16), w.data(), rstd.data(), N,
                       C);
      CHECK(dx16 == to_bf16(want_dx));
    }
    std::vector<uint16_t> y16 = x16;
    std::vector<float> want = x, db(C, 0.5f), want_db(C, 0.5f);
    t->bias_add(ref16(y16), b.data(), N, C);
    in->bias_add(want.data(), b.data(), N, C);
    CHECK(y16 == to_bf16(want));
    t->bias_bwd(db.data(), cref16(d16), N, C);
    in->bias_bwd(want_db.data(), d.data(), N, C);
    CHECK(db == want_db);
  }
}

TEST_CASE("a dtype outside an entry's mask stops the process, naming the entry and the dtype") {
  int sig = 0;
  const std::string err = child_stderr(
      [] {
        const loom_ops* t = loom::ops::typed(loom::ops::cpu());
        std::vector<uint16_t> x(16);
        std::vector<float> losses(1);
        std::vector<int32_t> targets(1);
        t->softmax_xent({x.data(), LOOM_BF16, 0}, losses.data(), targets.data(), 1, 16, 16, 1.f);
      },
      sig);
  CHECK(sig == SIGABRT);
  CHECK(err.find("loom_ops.softmax_xent was handed ") != std::string::npos);
  CHECK(err.find(" as bf16 (dtype 2)") != std::string::npos);
  CHECK(err.find("loom_ops.dtypes") != std::string::npos);
}
