// The CUDA op table against the CPU one: the same inputs through both, outputs within stated
// tolerances (fp32 math in both; the differences are summation order and atomics). Without a
// GPU the whole suite reports itself skipped (exit code 77, ctest's SKIP_RETURN_CODE), never
// passed.
#define DOCTEST_CONFIG_IMPLEMENT
#include <cuda_runtime.h>
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <random>
#include <string>
#include <vector>

#include "ops/cpu/kernels.hpp"
#include "ops/cuda/kernels.hpp"
#include "ops/ops.hpp"

namespace {

const loom_ops_v2& cpu() { return *loom::ops::cpu(); }
const loom_ops_v2& gpu() { return *loom::cuda::ops(); }

std::vector<float> random(size_t n, float scale = 1.f, uint32_t seed = 1) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

std::vector<float> filled(size_t n, float v = 0.f) { return std::vector<float>(n, v); }

// A device copy of a host vector, copied back by host().
template <class T>
struct Dev {
  T* p = nullptr;
  size_t n;
  explicit Dev(const std::vector<T>& h) : n(h.size()) {
    REQUIRE(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)) == cudaSuccess);
    REQUIRE(cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess);
  }
  ~Dev() { cudaFree(p); }
  std::vector<T> host() const {
    std::vector<T> h(n);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    REQUIRE(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
    return h;
  }
};

// |got - want| <= atol + rtol |want| for every element (equal infinities and NaNs agree).
void close(const std::vector<float>& got, const std::vector<float>& want, float rtol, float atol,
           const char* what) {
  REQUIRE(got.size() == want.size());
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const bool ok = got[i] == want[i] || (std::isnan(got[i]) && std::isnan(want[i])) ||
                    std::fabs(got[i] - want[i]) <= atol + rtol * std::fabs(want[i]);
    if (!ok && bad++ == 0) first = i;
  }
  INFO(what << ": " << bad << " of " << got.size() << " elements differ; element " << first
            << " is " << got[first] << ", the CPU says " << want[first]);
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("CUDA gemm matches the CPU for every transpose pair, with alpha, beta and strides") {
  const int64_t M = 37, N = 53, K = 29;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      const int64_t lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5, ldc = N + 2;
      auto A = random((ta ? K : M) * lda, 1.f, 1), B = random((tb ? N : K) * ldb, 1.f, 2),
           C = random(M * ldc, 1.f, 3);
      auto want = C;
      cpu().gemm(ta, tb, M, N, K, 0.7f, A.data(), lda, B.data(), ldb, 0.3f, want.data(), ldc);
      Dev<float> dA(A), dB(B), dC(C);
      gpu().gemm(ta, tb, M, N, K, 0.7f, dA.p, lda, dB.p, ldb, 0.3f, dC.p, ldc);
      close(dC.host(), want, 1e-4f, 1e-4f,
            ta ? (tb ? "gemm TT" : "gemm TN") : (tb ? "gemm NT" : "gemm NN"));
    }
}

TEST_CASE("CUDA norms match the CPU, forward and backward") {
  const int64_t N = 45, C = 96;
  auto x = random(N * C, 1.f, 4), w = random(C, 1.f, 5), b = random(C, 1.f, 6),
       dout = random(N * C, 1.f, 7);
  std::vector<float> out(N * C), mean(N), rstd(N), dx(N * C), dw(C, 0.5f), db(C, 0.25f);
  cpu().layernorm_fwd(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
  cpu().layernorm_bwd(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(),
                      rstd.data(), N, C);
  Dev<float> gx(x), gw(w), gb(b), gd(dout), gout(filled(N * C)), gmean(filled(N)), grstd(filled(N)),
      gdx(filled(N * C)), gdw(filled(C, 0.5f)), gdb(filled(C, 0.25f));
  gpu().layernorm_fwd(gout.p, gmean.p, grstd.p, gx.p, gw.p, gb.p, N, C);
  gpu().layernorm_bwd(gdx.p, gdw.p, gdb.p, gd.p, gx.p, gw.p, gmean.p, grstd.p, N, C);
  close(gout.host(), out, 1e-5f, 1e-5f, "layernorm out");
  close(grstd.host(), rstd, 1e-5f, 1e-6f, "layernorm rstd");
  close(gdx.host(), dx, 1e-4f, 1e-5f, "layernorm dx");
  close(gdw.host(), dw, 1e-4f, 1e-4f, "layernorm dw (accumulated)");
  close(gdb.host(), db, 1e-4f, 1e-4f, "layernorm db (accumulated)");
  std::vector<float> rout(N * C), rr(N), rdx(N * C), rdw(C, 0.5f);
  cpu().rmsnorm_fwd(rout.data(), rr.data(), x.data(), w.data(), N, C);
  cpu().rmsnorm_bwd(rdx.data(), rdw.data(), dout.data(), x.data(), w.data(), rr.data(), N, C);
  Dev<float> gro(filled(N * C)), grr(filled(N)), grdx(filled(N * C)), grdw(filled(C, 0.5f));
  gpu().rmsnorm_fwd(gro.p, grr.p, gx.p, gw.p, N, C);
  gpu().rmsnorm_bwd(grdx.p, grdw.p, gd.p, gx.p, gw.p, grr.p, N, C);
  close(gro.host(), rout, 1e-5f, 1e-5f, "rmsnorm out");
  close(grdx.host(), rdx, 1e-4f, 1e-5f, "rmsnorm dx");
  close(grdw.host(), rdw, 1e-4f, 1e-4f, "rmsnorm dw");
}

TEST_CASE("CUDA element-wise kernels, embedding and bias match the CPU") {
  const int64_t B = 3, T = 7, C = 40, V = 11, N = B * T, F = 24;
  std::vector<int32_t> tok(N);
  for (int64_t i = 0; i < N; ++i) tok[i] = static_cast<int32_t>((i * 5 + 3) % V);
  auto wte = random(V * C, 1.f, 8), wpe = random(T * C, 1.f, 9), d = random(N * C, 1.f, 10);
  std::vector<float> emb(N * C), dwte(V * C, 0.f), dwpe(T * C, 0.f);
  cpu().embedding_fwd(emb.data(), tok.data(), wte.data(), wpe.data(), B, T, C);
  cpu().embedding_bwd(dwte.data(), dwpe.data(), d.data(), tok.data(), B, T, C);
  Dev<int32_t> gtok(tok);
  Dev<float> gwte(wte), gwpe(wpe), gd(d), gemb(filled(N * C)), gdwte(filled(V * C, 0.f)),
      gdwpe(filled(T * C, 0.f));
  gpu().embedding_fwd(gemb.p, gtok.p, gwte.p, gwpe.p, B, T, C);
  gpu().embedding_bwd(gdwte.p, gdwpe.p, gd.p, gtok.p, B, T, C);
  close(gemb.host(), emb, 0.f, 1e-6f, "embedding");
  close(gdwte.host(), dwte, 1e-5f, 1e-5f, "embedding dwte");
  close(gdwpe.host(), dwpe, 1e-5f, 1e-5f, "embedding dwpe");

  auto x = random(N * 2 * F, 2.f, 11), dy = random(N * 2 * F, 1.f, 12),
       bias = random(2 * F, 1.f, 13);
  std::vector<float> g(N * 2 * F), dg(N * 2 * F), s(N * F), ds(N * 2 * F), ba = x, bb(2 * F, 0.1f);
  cpu().gelu_fwd(g.data(), x.data(), N * 2 * F);
  cpu().gelu_bwd(dg.data(), x.data(), dy.data(), N * 2 * F);
  cpu().swiglu_fwd(s.data(), x.data(), N, F);
  cpu().swiglu_bwd(ds.data(), x.data(), dy.data(), N, F);
  cpu().bias_add(ba.data(), bias.data(), N, 2 * F);
  cpu().bias_bwd(bb.data(), dy.data(), N, 2 * F);
  Dev<float> gx(x), gdy(dy), gbias(bias), gg(g), gdg(dg), gs(s), gds(ds), gba(x),
      gbb(filled(2 * F, 0.1f));
  gpu().gelu_fwd(gg.p, gx.p, N * 2 * F);
  gpu().gelu_bwd(gdg.p, gx.p, gdy.p, N * 2 * F);
  gpu().swiglu_fwd(gs.p, gx.p, N, F);
  gpu().swiglu_bwd(gds.p, gx.p, gdy.p, N, F);
  gpu().bias_add(gba.p, gbias.p, N, 2 * F);
  gpu().bias_bwd(gbb.p, gdy.p, N, 2 * F);
  close(gg.host(), g, 1e-5f, 1e-6f, "gelu");
  close(gdg.host(), dg, 1e-5f, 1e-6f, "gelu backward");
  close(gs.host(), s, 1e-5f, 1e-6f, "swiglu");
  close(gds.host(), ds, 1e-5f, 1e-6f, "swiglu backward");
  close(gba.host(), ba, 0.f, 1e-6f, "bias add");
  close(gbb.host(), bb, 1e-5f, 1e-5f, "bias backward");

  // Exact GELU (ABI 1.8).
  std::vector<float> ge(N * 2 * F), dge(N * 2 * F);
  cpu().gelu_erf_fwd(ge.data(), x.data(), N * 2 * F);
  cpu().gelu_erf_bwd(dge.data(), x.data(), dy.data(), N * 2 * F);
  Dev<float> gge(ge), gdge(dge);
  gpu().gelu_erf_fwd(gge.p, gx.p, N * 2 * F);
  gpu().gelu_erf_bwd(gdge.p, gx.p, gdy.p, N * 2 * F);
  close(gge.host(), ge, 1e-5f, 1e-6f, "exact gelu");
  close(gdge.host(), dge, 1e-5f, 1e-6f, "exact gelu backward");

  auto a = random(1000, 1.f, 14), c = random(1000, 1.f, 15);
  Dev<float> ga(a), gc(c), gy(filled(1000));
  gpu().add(gy.p, ga.p, gc.p, 1000);
  gpu().accumulate(gy.p, ga.p, 1000);
  gpu().scale(gy.p, 0.5f, 1000);
  std::vector<float> y(1000);
  cpu().add(y.data(), a.data(), c.data(), 1000);
  cpu().accumulate(y.data(), a.data(), 1000);
  cpu().scale(y.data(), 0.5f, 1000);
  close(gy.host(), y, 0.f, 1e-6f, "add, accumulate, scale");
  CHECK(gpu().sum_squares(ga.p, 1000) ==
        doctest::Approx(cpu().sum_squares(a.data(), 1000)).epsilon(1e-9));
}

TEST_CASE("CUDA attention matches the CPU's tiled kernel, forward and backward") {
  for (int64_t D : {16, 64, 80}) {
    const int64_t B = 2, T = 37, H = 3, C = H * D;
    auto qkv = random(B * T * 3 * C, 1.f, 16), dout = random(B * T * C, 1.f, 17);
    std::vector<float> out(B * T * C), lse(B * H * T), dqkv(B * T * 3 * C);
    cpu().attention_fwd(out.data(), lse.data(), qkv.data(), B, T, H, D);
    cpu().attention_bwd(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, H, D);
    Dev<float> gq(qkv), gdo(dout), gout(filled(B * T * C)), glse(filled(B * H * T)),
        gdq(filled(B * T * 3 * C));
    gpu().attention_fwd(gout.p, glse.p, gq.p, B, T, H, D);
    gpu().attention_bwd(gdq.p, gdo.p, gq.p, gout.p, glse.p, B, T, H, D);
    INFO("head dim " << D);
    close(gout.host(), out, 1e-4f, 1e-5f, "attention out");
    close(glse.host(), lse, 1e-5f, 1e-5f, "attention lse");
    close(gdq.host(), dqkv, 1e-3f, 1e-4f, "attention dqkv");
  }
}

TEST_CASE("CUDA grouped-query attention, RoPE and norms with eps match the CPU (ABI 1.4)") {
  const int64_t B = 2, T = 29, H = 6, Hkv = 2, D = 32, ldq = H * D, ldkv = 2 * Hkv * D;
  auto q = random(B * T * ldq, 1.f, 30), kv = random(B * T * ldkv, 1.f, 31),
       dout = random(B * T * H * D, 1.f, 32);
  std::vector<float> out(B * T * H * D), lse(B * H * T), dq(q.size()), dkv(kv.size());
  cpu().attention_gqa_fwd(out.data(), lse.data(), q.data(), kv.data(), kv.data() + Hkv * D, ldq,
                          ldkv, B, T, H, Hkv, D);
  cpu().attention_gqa_bwd(dq.data(), dkv.data(), dkv.data() + Hkv * D, dout.data(), q.data(),
                          kv.data(), kv.data() + Hkv * D, out.data(), lse.data(), ldq, ldkv, B, T,
                          H, Hkv, D);
  Dev<float> gq(q), gkv(kv), gdo(dout), gout(filled(out.size())), glse(filled(lse.size())),
      gdq(filled(dq.size())), gdkv(filled(dkv.size()));
  gpu().attention_gqa_fwd(gout.p, glse.p, gq.p, gkv.p, gkv.p + Hkv * D, ldq, ldkv, B, T, H, Hkv, D);
  gpu().attention_gqa_bwd(gdq.p, gdkv.p, gdkv.p + Hkv * D, gdo.p, gq.p, gkv.p, gkv.p + Hkv * D,
                          gout.p, glse.p, ldq, ldkv, B, T, H, Hkv, D);
  close(gout.host(), out, 1e-4f, 1e-5f, "gqa out");
  close(gdq.host(), dq, 1e-3f, 1e-4f, "gqa dq");
  close(gdkv.host(), dkv, 1e-3f, 1e-4f, "gqa dk, dv");

  auto cs = random(T * D / 2, 1.f, 33), sn = random(T * D / 2, 1.f, 34),
       x = random(B * T * ldq, 1.f, 35);
  Dev<float> gcs(cs), gsn(sn), gx(x);
  cpu().rope_fwd(x.data(), ldq, B, T, H, D, cs.data(), sn.data(), 0);
  gpu().rope_fwd(gx.p, ldq, B, T, H, D, gcs.p, gsn.p, 0);
  close(gx.host(), x, 1e-6f, 1e-6f, "rope forward");
  cpu().rope_bwd(x.data(), ldq, B, T, H, D, cs.data(), sn.data(), 0);
  gpu().rope_bwd(gx.p, ldq, B, T, H, D, gcs.p, gsn.p, 0);
  close(gx.host(), x, 1e-6f, 1e-6f, "rope backward");

  const int64_t N = 7, C = 96;
  auto in = random(N * C, 1.f, 36), w = random(C, 1.f, 37);
  std::vector<float> o(N * C), mean(N), rstd(N);
  Dev<float> gin(in), gw(w), go(filled(N * C)), gm(filled(N)), gr(filled(N));
  cpu().layernorm_fwd_eps(o.data(), mean.data(), rstd.data(), in.data(), w.data(), nullptr, N, C,
                          1e-6f);
  gpu().layernorm_fwd_eps(go.p, gm.p, gr.p, gin.p, gw.p, nullptr, N, C, 1e-6f);
  close(go.host(), o, 1e-5f, 1e-6f, "layernorm without bias, eps 1e-6");
  cpu().rmsnorm_fwd_eps(o.data(), rstd.data(), in.data(), w.data(), N, C, 1e-6f);
  gpu().rmsnorm_fwd_eps(go.p, gr.p, gin.p, gw.p, N, C, 1e-6f);
  close(go.host(), o, 1e-5f, 1e-6f, "rmsnorm eps 1e-6");
}

TEST_CASE("CUDA block attention with positions and merge match the CPU (ABI 1.5)") {
  // Queries at {4..7, 12..15} over two key blocks: block 1 at {0..3, 8..11}, block 2 at
  // {6..9, 13..16}, where the queries at 4 and 5 see no key (out 0, lse -inf).
  const int64_t B = 2, Tq = 8, Tk = 8, H = 4, Hkv = 2, D = 16, C = H * D, ldq = C,
                ldkv = 2 * Hkv * D;
  const std::vector<int64_t> qpos{4, 5, 6, 7, 12, 13, 14, 15}, kpos1{0, 1, 2, 3, 8, 9, 10, 11},
      kpos2{6, 7, 8, 9, 13, 14, 15, 16};
  auto q = random(B * Tq * ldq, 1.f, 40), kv1 = random(B * Tk * ldkv, 1.f, 41),
       kv2 = random(B * Tk * ldkv, 1.f, 42), dout = random(B * Tq * C, 1.f, 43);
  std::vector<float> out1(B * Tq * C), lse1(B * H * Tq), out2(out1.size()), lse2(lse1.size());
  cpu().attention_block_fwd(out1.data(), lse1.data(), q.data(), kv1.data(), kv1.data() + Hkv * D,
                            ldq, ldkv, B, Tq, Tk, H, Hkv, D, qpos.data(), kpos1.data());
  cpu().attention_block_fwd(out2.data(), lse2.data(), q.data(), kv2.data(), kv2.data() + Hkv * D,
                            ldq, ldkv, B, Tq, Tk, H, Hkv, D, qpos.data(), kpos2.data());
  Dev<float> gq(q), gkv1(kv1), gkv2(kv2), gdo(dout), gout1(filled(out1.size())),
      glse1(filled(lse1.size())), gout2(filled(out2.size())), glse2(filled(lse2.size()));
  Dev<int64_t> gqpos(qpos), gkpos1(kpos1), gkpos2(kpos2);
  gpu().attention_block_fwd(gout1.p, glse1.p, gq.p, gkv1.p, gkv1.p + Hkv * D, ldq, ldkv, B, Tq, Tk,
                            H, Hkv, D, gqpos.p, gkpos1.p);
  gpu().attention_block_fwd(gout2.p, glse2.p, gq.p, gkv2.p, gkv2.p + Hkv * D, ldq, ldkv, B, Tq, Tk,
                            H, Hkv, D, gqpos.p, gkpos2.p);
  close(gout1.host(), out1, 1e-4f, 1e-5f, "block 1 out");
  close(glse1.host(), lse1, 1e-5f, 1e-5f, "block 1 lse");
  close(gout2.host(), out2, 1e-4f, 1e-5f, "block 2 out (rows without keys are 0)");
  close(glse2.host(), lse2, 1e-5f, 1e-5f, "block 2 lse (rows without keys are -inf)");

  // Both orders: 2 into 1 skips the empty rows, 1 into 2 takes block 1's rows where 2 has none.
  auto out12 = out1, lse12 = lse1, out21 = out2, lse21 = lse2;
  cpu().attention_merge(out12.data(), lse12.data(), out2.data(), lse2.data(), B, Tq, H, D);
  cpu().attention_merge(out21.data(), lse21.data(), out1.data(), lse1.data(), B, Tq, H, D);
  Dev<float> gout12(gout1.host()), glse12(glse1.host()), gout21(gout2.host()), glse21(glse2.host());
  gpu().attention_merge(gout12.p, glse12.p, gout2.p, glse2.p, B, Tq, H, D);
  gpu().attention_merge(gout21.p, glse21.p, gout1.p, glse1.p, B, Tq, H, D);
  close(gout12.host(), out12, 1e-4f, 1e-5f, "merged out, 2 into 1");
  close(glse12.host(), lse12, 1e-5f, 1e-5f, "merged lse, 2 into 1");
  close(gout21.host(), out21, 1e-4f, 1e-5f, "merged out, 1 into 2");
  close(glse21.host(), lse21, 1e-5f, 1e-5f, "merged lse, 1 into 2");

  // Each block's share of the gradients, given the merged out and lse.
  std::vector<float> dq1(q.size()), dq2(q.size()), dkv1(kv1.size()), dkv2(kv2.size());
  cpu().attention_block_bwd(dq1.data(), dkv1.data(), dkv1.data() + Hkv * D, dout.data(), q.data(),
                            kv1.data(), kv1.data() + Hkv * D, out12.data(), lse12.data(), ldq, ldkv,
                            B, Tq, Tk, H, Hkv, D, qpos.data(), kpos1.data());
  cpu().attention_block_bwd(dq2.data(), dkv2.data(), dkv2.data() + Hkv * D, dout.data(), q.data(),
                            kv2.data(), kv2.data() + Hkv * D, out12.data(), lse12.data(), ldq, ldkv,
                            B, Tq, Tk, H, Hkv, D, qpos.data(), kpos2.data());
  Dev<float> gdq1(filled(q.size())), gdq2(filled(q.size())), gdkv1(filled(kv1.size(), 7.f)),
      gdkv2(filled(kv2.size(), 7.f));  // dk and dv are overwritten, not added to
  gpu().attention_block_bwd(gdq1.p, gdkv1.p, gdkv1.p + Hkv * D, gdo.p, gq.p, gkv1.p,
                            gkv1.p + Hkv * D, gout12.p, glse12.p, ldq, ldkv, B, Tq, Tk, H, Hkv, D,
                            gqpos.p, gkpos1.p);
  gpu().attention_block_bwd(gdq2.p, gdkv2.p, gdkv2.p + Hkv * D, gdo.p, gq.p, gkv2.p,
                            gkv2.p + Hkv * D, gout12.p, glse12.p, ldq, ldkv, B, Tq, Tk, H, Hkv, D,
                            gqpos.p, gkpos2.p);
  close(gdq1.host(), dq1, 1e-3f, 1e-4f, "block 1 dq");
  close(gdkv1.host(), dkv1, 1e-3f, 1e-4f, "block 1 dk, dv");
  close(gdq2.host(), dq2, 1e-3f, 1e-4f, "block 2 dq");
  close(gdkv2.host(), dkv2, 1e-3f, 1e-4f, "block 2 dk, dv (the key at 16 gets 0)");
}

TEST_CASE(
    "CUDA device contract (ABI 2.2): copies both ways, zero, events and pinned memory do what the "
    "CPU's do") {
  const loom_ops_v2& g = gpu();
  REQUIRE(LOOM_HAS_FIELD(&g, loom_ops_v2, pinned_free));
  const std::vector<float> x = random(4097, 1.f, 11);
  Dev<float> d(filled(x.size()));
  g.copy(d.p, x.data(), static_cast<int64_t>(x.size() * sizeof(float)));  // host to device
  const int64_t copied = g.record_event();
  g.sync_event(copied);
  CHECK(d.host() == x);
  auto* pinned =
      static_cast<float*>(g.pinned_alloc(static_cast<int64_t>(x.size() * sizeof(float))));
  REQUIRE(pinned);
  g.copy(pinned, d.p, static_cast<int64_t>(x.size() * sizeof(float)));  // device to pinned host
  g.synchronize();
  CHECK(std::vector<float>(pinned, pinned + x.size()) == x);
  g.pinned_free(pinned);
  g.zero(d.p + 1, 100 * sizeof(float));
  std::vector<float> want = x;
  cpu().zero(want.data() + 1, 100 * sizeof(float));
  CHECK(d.host() == want);
}

TEST_CASE(
    "CUDA device contract (ABI 2.4): declared as config check reads it, streams ordered by events, "
    "host operands without a drain") {
  const loom_ops_v2& g = gpu();
  CHECK(g.host_reachable == 0);
  CHECK(loom::ops::declared_host_reachable("cuda") == (g.host_reachable == 1));
  // A kernel on compute, a copy of its output on comm after compute's event, read after comm's.
  const std::vector<float> a = random(3001, 1.f, 12), b = random(3001, 1.f, 13);
  Dev<float> da(a), db(b), dy(filled(a.size()));
  g.add(dy.p, da.p, db.p, static_cast<int64_t>(a.size()));
  const int64_t added = g.record_event();
  g.set_stream(LOOM_STREAM_COMM);
  g.wait_event(added);
  std::vector<float> y(a.size());
  auto* pinned =
      static_cast<float*>(g.pinned_alloc(static_cast<int64_t>(y.size() * sizeof(float))));
  g.copy(pinned, dy.p, static_cast<int64_t>(y.size() * sizeof(float)));
  const int64_t copied = g.record_event();
  g.set_stream(LOOM_STREAM_COMPUTE);
  g.sync_event(copied);
  std::vector<float> want(a.size());
  cpu().add(want.data(), a.data(), b.data(), static_cast<int64_t>(a.size()));
  CHECK(std::vector<float>(pinned, pinned + y.size()) == want);
  g.pinned_free(pinned);
  // Token ids in pageable host memory, overwritten at once: the op has its own copy.
  const int64_t B = 2, T = 5, C = 16;
  std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6, 7, 0, 1, 2};
  const std::vector<float> wte = random(8 * C, 1.f, 14);
  Dev<float> dwte(wte), dout(filled(B * T * C));
  g.embedding_fwd(dout.p, tokens.data(), dwte.p, nullptr, B, T, C);
  const std::vector<int32_t> sent = tokens;
  std::fill(tokens.begin(), tokens.end(), 7);
  std::vector<float> out(B * T * C);
  cpu().embedding_fwd(out.data(), sent.data(), wte.data(), nullptr, B, T, C);
  CHECK(dout.host() == out);
  // Every tensor's sum of squares in one call, as one per tensor.
  REQUIRE(LOOM_HAS_FIELD(&g, loom_ops_v2, sum_squares_multi));
  const std::vector<const float*> xs = {da.p, db.p};
  const std::vector<int64_t> n = {3001, 1000};
  std::vector<double> sums(2);
  g.sum_squares_multi(2, xs.data(), n.data(), sums.data());
  CHECK(sums[0] == doctest::Approx(cpu().sum_squares(a.data(), 3001)).epsilon(1e-9));
  CHECK(sums[1] == doctest::Approx(cpu().sum_squares(b.data(), 1000)).epsilon(1e-9));
}

TEST_CASE("CUDA softmax cross-entropy, AdamW (one tensor and several) and quantize match the CPU") {
  const int64_t N = 9, V = 300, Vr = 290;
  auto z = random(N * V, 3.f, 18);
  std::vector<int32_t> t(N);
  for (int64_t i = 0; i < N; ++i) t[i] = i == 4 ? -1 : static_cast<int32_t>((i * 37) % Vr);
  auto zc = z;
  std::vector<float> losses(N);
  cpu().softmax_xent(zc.data(), losses.data(), t.data(), N, V, Vr, 0.125f);
  Dev<float> gz(z), gl(filled(N));
  Dev<int32_t> gt(t);
  gpu().softmax_xent(gz.p, gl.p, gt.p, N, V, Vr, 0.125f);
  close(gl.host(), losses, 1e-5f, 1e-5f, "cross-entropy losses");
  close(gz.host(), zc, 1e-4f, 1e-7f, "cross-entropy gradient");

  auto p = random(4096, 1.f, 19), g = random(4096, 1.f, 20), m = random(4096, 0.1f, 21),
       v = random(4096, 0.1f, 22);
  for (float& x : v) x = std::fabs(x);
  auto pc = p, mc = m, vc = v;
  cpu().adamw(pc.data(), g.data(), mc.data(), vc.data(), 4096, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 7);
  Dev<float> gp(p), gg(g), gm(m), gv(v);
  gpu().adamw(gp.p, gg.p, gm.p, gv.p, 4096, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 7);
  close(gp.host(), pc, 1e-5f, 1e-7f, "adamw params");
  close(gv.host(), vc, 1e-5f, 1e-9f, "adamw v");

  // Several tensors in one launch (ABI 2.3): sizes over a chunk, of one element and of none.
  const std::vector<int64_t> numel = {40000, 1, 0, 333};
  const std::vector<float> wd = {0.1f, 0.f, 0.1f, 0.05f};
  std::vector<std::vector<float>> hp, hg, hm, hv;
  std::deque<Dev<float>> dp, dg, dm, dv;  // a deque never moves its elements
  std::vector<float*> pp, mp, vp;
  std::vector<const float*> gp2;
  for (size_t i = 0; i < numel.size(); ++i) {
    hp.push_back(random(numel[i], 1.f, 30 + i)), hg.push_back(random(numel[i], 1.f, 40 + i));
    hm.push_back(random(numel[i], 0.1f, 50 + i)), hv.push_back(random(numel[i], 0.1f, 60 + i));
    for (float& x : hv.back()) x = std::fabs(x);
    dp.emplace_back(hp[i]), dg.emplace_back(hg[i]), dm.emplace_back(hm[i]), dv.emplace_back(hv[i]);
    pp.push_back(dp[i].p), gp2.push_back(dg[i].p), mp.push_back(dm[i].p), vp.push_back(dv[i].p);
  }
  gpu().adamw_multi(4, pp.data(), gp2.data(), mp.data(), vp.data(), numel.data(), wd.data(), 1e-3f,
                    0.9f, 0.95f, 1e-8f, 7);
  cpu().adamw_multi(
      4, std::vector<float*>{hp[0].data(), hp[1].data(), hp[2].data(), hp[3].data()}.data(),
      std::vector<const float*>{hg[0].data(), hg[1].data(), hg[2].data(), hg[3].data()}.data(),
      std::vector<float*>{hm[0].data(), hm[1].data(), hm[2].data(), hm[3].data()}.data(),
      std::vector<float*>{hv[0].data(), hv[1].data(), hv[2].data(), hv[3].data()}.data(),
      numel.data(), wd.data(), 1e-3f, 0.9f, 0.95f, 1e-8f, 7);
  for (size_t i = 0; i < numel.size(); ++i) {
    close(dp[i].host(), hp[i], 1e-5f, 1e-7f, "adamw_multi params");
    close(dm[i].host(), hm[i], 1e-5f, 1e-9f, "adamw_multi m");
    close(dv[i].host(), hv[i], 1e-5f, 1e-9f, "adamw_multi v");
  }

  for (int32_t dtype : {LOOM_BF16, LOOM_F16, LOOM_FP8_E4M3, LOOM_FP8_E5M2})
    for (float scale : {2.f, 3.f}) {  // 3: 1/scale is not exact, so the order of operations shows
      auto x = random(5000, 100.f, 23);
      x[7] = 1e9f, x[8] = -3e6f, x[9] = 1e-9f, x[10] = 0.f, x[11] = -0.f, x[12] = 1e-38f,
      x[13] = 3e38f;
      auto xc = x;
      float amax = 0, gamax = 0;
      int64_t clipped = 0, gclipped = 0;
      cpu().quantize(xc.data(), 5000, dtype, scale, &amax, &clipped);
      Dev<float> gx(x);
      gpu().quantize(gx.p, 5000, dtype, scale, &gamax, &gclipped);
      INFO("dtype " << dtype << ", scale " << scale);
      close(gx.host(), xc, 0.f, 0.f, "quantize (bit-exact)");
      CHECK(gamax == amax);
      CHECK(gclipped == clipped);
    }
}

TEST_CASE(
    "CUDA wire codecs (byte for byte) and the vocab-slice cross-entropy match the CPU (ABI 2.5)") {
  auto x = random(2000, 10.f, 24);
  x[3] = 0.f, x[4] = -0.f, x[5] = 1e30f, x[6] = NAN, x[7] = INFINITY, x[8] = 1e-40f;
  for (int i = 100; i < 113; ++i)
    x[i] = 1e-38f * static_cast<float>(i - 99);  // a block below 448 / FLT_MAX
  std::vector<uint16_t> half(2000);
  cpu().to_bf16(half.data(), x.data(), 2000);
  Dev<float> gx(x);
  Dev<uint16_t> gh{std::vector<uint16_t>(2000)};
  gpu().to_bf16(gh.p, gx.p, 2000);
  CHECK(gh.host() == half);
  std::vector<float> wide(2000);
  cpu().from_bf16(wide.data(), half.data(), 2000);
  Dev<float> gw(filled(2000));
  gpu().from_bf16(gw.p, gh.p, 2000);
  close(gw.host(), wide, 0.f, 0.f, "from_bf16 (bit-exact)");
  // (count, width, blocks): a short last block and odd widths (unaligned scales); one wide block.
  for (const auto& [count, width, blocks] :
       {std::array<int64_t, 3>{1990, 13, 160}, {2000, 2000, 1}, {900, 301, 4}}) {
    INFO("count " << count << ", width " << width << ", blocks " << blocks);
    const int64_t bytes = blocks * (4 + width);
    std::vector<uint8_t> code(bytes);
    cpu().encode_blocks(code.data(), x.data(), count, width, blocks);
    Dev<uint8_t> gc{std::vector<uint8_t>(static_cast<size_t>(bytes))};
    gpu().encode_blocks(gc.p, gx.p, count, width, blocks);
    CHECK(gc.host() == code);
    for (int32_t flags : {0, LOOM_BLOCKS_SUM | LOOM_BLOCKS_ADD}) {
      const int64_t n = (flags & LOOM_BLOCKS_SUM) ? width : width * blocks;
      auto back = random(n, 1.f, 25);
      Dev<float> gb(back);
      cpu().decode_blocks(back.data(), code.data(), count, width, blocks, flags);
      gpu().decode_blocks(gb.p, gc.p, count, width, blocks, flags);
      close(gb.host(), back, flags ? 1e-6f : 0.f, 0.f, "decode_blocks");
    }
  }
  // A slice [100, 100 + ld) of the classes, cols of them real; a row ignored, a target off the
  // slice.
  const int64_t N = 33, ld = 260, cols = 250, first = 100;
  auto z = random(N * ld, 3.f, 26);
  std::vector<int32_t> t(N);
  for (int64_t i = 0; i < N; ++i) t[i] = static_cast<int32_t>(first + (i * 53) % (cols + 30));
  t[2] = -1, t[3] = 5;
  std::vector<float> mx(N), st(2 * N), losses(N), zc = z;
  cpu().row_max(mx.data(), z.data(), N, ld, cols);
  cpu().xent_stats(st.data(), z.data(), t.data(), mx.data(), N, ld, cols, first);
  cpu().xent_grad(zc.data(), losses.data(), t.data(), mx.data(), st.data(), N, ld, cols, first,
                  0.125f);
  Dev<float> gz(z), gm(filled(N)), gs(filled(2 * N));
  std::vector<float> glosses(N, -1.f);
  gpu().row_max(gm.p, gz.p, N, ld, cols);
  close(gm.host(), mx, 0.f, 0.f, "row_max (bit-exact)");
  gpu().xent_stats(gs.p, gz.p, t.data(), gm.p, N, ld, cols, first);  // targets from host memory
  close(gs.host(), st, 1e-5f, 1e-7f, "xent_stats");
  gpu().xent_grad(gz.p, glosses.data(), t.data(), gm.p, gs.p, N, ld, cols, first, 0.125f);
  close(glosses, losses, 1e-5f, 1e-6f, "vocab-slice losses");
  close(gz.host(), zc, 1e-4f, 1e-7f, "vocab-slice gradient");
}

// The MoE routing entries: experts and sequences' sums written to host arrays, indices and slots
// read from host arrays. A GPU's double exp and log may differ from glibc's in the last bit, so
// the floats are held within 1e-6 and the experts chosen exactly (the inputs have no near ties).
TEST_CASE(
    "CUDA MoE routing (router top-k and its backward, gather, combine and its backward) matches "
    "the CPU (ABI 2.6)") {
  const int64_t N = 512, E = 8, K = 2, T = 128, B = N / T, C = 96;
  const auto z = random(N * E, 2.f, 31);
  std::vector<float> p(N * E), lse(N), w(N * K);
  std::vector<int32_t> ex(N * K), gex(N * K, -1);
  std::vector<double> seq(B * (E + 1)), gseq(B * (E + 1), -1.0);
  cpu().router_topk(p.data(), lse.data(), w.data(), ex.data(), seq.data(), z.data(), N, E, K, T);
  Dev<float> gz(z), gp(filled(N * E)), gl(filled(N)), gw(filled(N * K));
  gpu().router_topk(gp.p, gl.p, gw.p, gex.data(), gseq.data(), gz.p, N, E, K, T);
  CHECK(gex == ex);
  close(gp.host(), p, 1e-6f, 1e-7f, "router probabilities");
  close(gl.host(), lse, 1e-6f, 1e-7f, "router log-sum-exp");
  close(gw.host(), w, 1e-6f, 1e-7f, "router weights");
  for (size_t i = 0; i < seq.size(); ++i) CHECK(gseq[i] == doctest::Approx(seq[i]).epsilon(1e-9));
  std::vector<int32_t> slot(N * K), token;
  for (int64_t i = 0; i < N * K; ++i) {  // every ninth choice dropped
    slot[i] = i % 9 == 4 ? -1 : static_cast<int32_t>(token.size());
    if (slot[i] >= 0) token.push_back(static_cast<int32_t>(i / K));
  }
  const int64_t R = static_cast<int64_t>(token.size());
  const auto h = random(N * C, 1.f, 32), dy = random(N * C, 1.f, 33), dwk = random(N * K, 1.f, 34);
  std::vector<float> rows(R * C), y(N * C), drows(R * C), dw(N * K), dz(N * E);
  std::vector<double> balance(B * E);
  for (int64_t i = 0; i < B * E; ++i) balance[i] = 0.01 * static_cast<double>(i % 5);
  cpu().gather_rows(rows.data(), h.data(), token.data(), R, C);
  cpu().combine_rows(y.data(), rows.data(), w.data(), slot.data(), N, K, C);
  cpu().combine_rows_bwd(drows.data(), dw.data(), dy.data(), rows.data(), w.data(), slot.data(), N,
                         K, C);
  cpu().router_topk_bwd(dz.data(), p.data(), lse.data(), w.data(), dwk.data(), ex.data(),
                        balance.data(), 0.004, N, E, K, T);
  Dev<float> gh(h), grows(filled(R * C)), gy(filled(N * C)), gdy(dy), gdrows(filled(R * C)),
      gdw(filled(N * K));
  Dev<float> gdwk(dwk), gdz(filled(N * E)), gpc(p), glc(lse), gwc(w);
  gpu().gather_rows(grows.p, gh.p, token.data(), R, C);
  close(grows.host(), rows, 0.f, 0.f, "gather_rows (bit-exact)");
  gpu().combine_rows(gy.p, grows.p, gwc.p, slot.data(), N, K, C);
  close(gy.host(), y, 1e-6f, 1e-7f, "combine_rows");
  gpu().combine_rows_bwd(gdrows.p, gdw.p, gdy.p, grows.p, gwc.p, slot.data(), N, K, C);
  close(gdrows.host(), drows, 0.f, 0.f, "combine_rows_bwd rows (bit-exact)");
  close(gdw.host(), dw, 1e-6f, 1e-7f, "combine_rows_bwd weights");
  gpu().router_topk_bwd(gdz.p, gpc.p, glc.p, gwc.p, gdwk.p, ex.data(), balance.data(), 0.004, N, E,
                        K, T);
  close(gdz.host(), dz, 1e-6f, 1e-7f, "router backward");
}

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  bool listing = false;
  for (int i = 1; i < argc; ++i) listing |= std::strstr(argv[i], "list") != nullptr;
  std::string why;
  if (!listing && !loom::cuda::available(&why)) {
    std::printf("skipped: %s (the CUDA op tests need a GPU)\n", why.c_str());
    return 77;
  }
  return context.run();
}
