#include "ops/typed_ops.hpp"

#include <array>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <loom/bf16.hpp>
#include <mutex>
#include <utility>
#include <vector>

#include "ops/cpu/kernels.hpp"

namespace loom::ops {
namespace {

// One typed table per ABI 2 table: the devices' own (cpu, strict, cuda) and the few a process
// builds besides them (a profiler's wrapper, a test's).
constexpr int kSlots = 8;
std::array<const loom_ops_v2*, kSlots> g_inner{};

constexpr uint32_t bit(int32_t dtype) { return dtype >= 0 && dtype < 32 ? 1u << dtype : 0u; }

const char* dtype_name(int32_t d) {
  static const char* names[] = {"f32",      "f64", "bf16", "f16", "fp8_e4m3",
                                "fp8_e5m2", "i32", "i64",  "u8"};
  return d >= 0 && d < 9 ? names[d] : "an unknown dtype";
}

// A typed argument outside the entry's mask: a bug in the caller, reported as a GPU reports an
// illegal launch, since a kernel entry has no error channel.
[[noreturn]] void refuse(const char* entry, const char* arg, int32_t dtype) {
  std::fprintf(stderr,
               "loom: loom_ops.%s was handed %s as %s (dtype %d), which this device's table does "
               "not accept (see loom_ops.dtypes)\n",
               entry, arg, dtype_name(dtype), dtype);
  std::abort();
}

float* f32(loom_ref r, const char* entry, const char* arg) {
  if (r.dtype != LOOM_F32) refuse(entry, arg, r.dtype);
  return static_cast<float*>(r.data);
}
const float* f32(loom_cref r, const char* entry, const char* arg) {
  if (r.dtype != LOOM_F32) refuse(entry, arg, r.dtype);
  return static_cast<const float*>(r.data);
}

// The bf16 form of an element-wise or activation entry on a device whose memory the host reaches
// (the CPU): widen each narrow input, run the fp32 kernel, round each narrow output once. So it is
// the fp32 kernel's math on the inputs' values, with one rounding per element written.
// The casts are the device's own codec kernels (from_bf16, to_bf16).
class Widened {
 public:
  Widened(const loom_ops_v2& ops, loom_cref r, int64_t n) {
    if (r.dtype == LOOM_F32) {
      p_ = static_cast<const float*>(r.data);
      return;
    }
    copy_.resize(static_cast<size_t>(n));
    ops.from_bf16(copy_.data(), static_cast<const uint16_t*>(r.data), n);
    p_ = copy_.data();
  }
  const float* get() const { return p_; }

 private:
  std::vector<float> copy_;
  const float* p_ = nullptr;
};

// An output (`load`: also an input, as accumulate's y), rounded back when it goes out of scope.
// A strided one (rows of `width` elements, `ld` apart) is loaded whole and written back row by
// row, its own columns only: a fused layout interleaves other tensors' columns between them.
class Narrowed {
 public:
  Narrowed(const loom_ops_v2& ops, loom_ref r, int64_t n, bool load)
      : Narrowed(ops, r, 1, n, n, load) {}
  Narrowed(const loom_ops_v2& ops, loom_ref r, int64_t rows, int64_t ld, int64_t width, bool load)
      : ops_(ops), r_(r), rows_(rows), ld_(ld), width_(width) {
    if (r.dtype == LOOM_F32) {
      p_ = static_cast<float*>(r.data);
      return;
    }
    const int64_t n = rows > 0 ? (rows - 1) * ld + width : 0;
    copy_.resize(static_cast<size_t>(n));
    if (load) ops.from_bf16(copy_.data(), static_cast<const uint16_t*>(r.data), n);
    p_ = copy_.data();
  }
  ~Narrowed() {
    if (r_.dtype == LOOM_F32) return;
    for (int64_t i = 0; i < rows_; ++i)
      ops_.to_bf16(static_cast<uint16_t*>(r_.data) + i * ld_, copy_.data() + i * ld_, width_);
  }
  Narrowed(const Narrowed&) = delete;
  Narrowed& operator=(const Narrowed&) = delete;
  float* get() { return p_; }

 private:
  const loom_ops_v2& ops_;
  loom_ref r_;
  int64_t rows_, ld_, width_;
  std::vector<float> copy_;
  float* p_ = nullptr;
};

// The CPU's activation kernels read and write bf16 storage themselves (ops/cpu/activations.cpp):
// where an ABI 2 table's kernel is the CPU's, its typed form runs instead of widening into copies,
// with the same bits.
using Unary = void (*)(float*, const float*, int64_t);
using UnaryBwd = void (*)(float*, const float*, const float*, int64_t);
using UnaryTyped = void (*)(loom_ref, loom_cref, int64_t);
using UnaryBwdTyped = void (*)(loom_ref, loom_cref, loom_cref, int64_t);
UnaryTyped cpu_typed(Unary k) {
  if (k == static_cast<Unary>(&cpu::gelu_fwd)) return &cpu::gelu_fwd;
  if (k == static_cast<Unary>(&cpu::gelu_erf_fwd)) return &cpu::gelu_erf_fwd;
  return nullptr;
}
UnaryBwdTyped cpu_typed(UnaryBwd k) {
  if (k == static_cast<UnaryBwd>(&cpu::gelu_bwd)) return &cpu::gelu_bwd;
  if (k == static_cast<UnaryBwd>(&cpu::gelu_erf_bwd)) return &cpu::gelu_erf_bwd;
  return nullptr;
}
using Swiglu = void (*)(float*, const float*, int64_t, int64_t);
using SwigluBwd = void (*)(float*, const float*, const float*, int64_t, int64_t);
bool cpu_own(Swiglu k) { return k == static_cast<Swiglu>(&cpu::swiglu_fwd); }
bool cpu_own(SwigluBwd k) { return k == static_cast<SwigluBwd>(&cpu::swiglu_bwd); }

// The forwarding entries of slot Kind: each reads its ABI 2 table from g_inner[Kind].
template <int Kind>
struct Typed {
  static const loom_ops_v2& in() { return *g_inner[Kind]; }

  // Whether every argument is fp32 (the ABI 2 kernel takes them as they are); otherwise each
  // must be fp32 or bf16 on a device the host reaches, which the bf16 forms need.
  static bool all_f32(const char* entry, std::initializer_list<std::pair<const char*, int32_t>> a) {
    bool f32_only = true;
    for (const auto& [arg, dtype] : a) {
      if (dtype == LOOM_F32) continue;
      if (dtype != LOOM_BF16 || !in().host_reachable) refuse(entry, arg, dtype);
      f32_only = false;
    }
    return f32_only;
  }

  static void gemm(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, loom_cref A,
                   int64_t lda, loom_cref B, int64_t ldb, float beta, loom_ref C, int64_t ldc) {
    float* c = f32(C, "gemm", "C");
    if (A.dtype == LOOM_F32 && B.dtype == LOOM_F32)
      return in().gemm(ta, tb, M, N, K, alpha, static_cast<const float*>(A.data), lda,
                       static_cast<const float*>(B.data), ldb, beta, c, ldc);
    const uint32_t ok = in().gemm_typed ? bit(LOOM_F32) | bit(LOOM_BF16) : bit(LOOM_F32);
    if (!(ok & bit(A.dtype))) refuse("gemm", "A", A.dtype);
    if (!(ok & bit(B.dtype))) refuse("gemm", "B", B.dtype);
    in().gemm_typed(ta, tb, M, N, K, alpha, A.data, A.dtype, lda, B.data, B.dtype, ldb, beta, c,
                    ldc);
  }
  static void embedding_fwd(loom_ref out, const int32_t* tok, const float* wte, const float* wpe,
                            int64_t B, int64_t T, int64_t C) {
    in().embedding_fwd(f32(out, "embedding_fwd", "out"), tok, wte, wpe, B, T, C);
  }
  static void embedding_bwd(float* dwte, float* dwpe, loom_cref dout, const int32_t* tok, int64_t B,
                            int64_t T, int64_t C) {
    in().embedding_bwd(dwte, dwpe, f32(dout, "embedding_bwd", "dout"), tok, B, T, C);
  }
  // The norms with any tensor bf16, on a device the host reaches: the CPU's own kernels read and
  // write it (cpu_norms), another device's fp32 kernel runs on widened copies.
  static bool cpu_norms() {
    using LnF = decltype(loom_ops_v2::layernorm_fwd_eps);
    using LnB = decltype(loom_ops_v2::layernorm_bwd);
    using RmsF = decltype(loom_ops_v2::rmsnorm_fwd_eps);
    using RmsB = decltype(loom_ops_v2::rmsnorm_bwd);
    return in().layernorm_fwd_eps == static_cast<LnF>(&cpu::layernorm_fwd_eps) &&
           in().layernorm_bwd == static_cast<LnB>(&cpu::layernorm_bwd) &&
           in().rmsnorm_fwd_eps == static_cast<RmsF>(&cpu::rmsnorm_fwd_eps) &&
           in().rmsnorm_bwd == static_cast<RmsB>(&cpu::rmsnorm_bwd);
  }
  static void layernorm_fwd(loom_ref out, float* mean, float* rstd, loom_cref inp, const float* w,
                            const float* b, int64_t N, int64_t C, float eps) {
    const char* e = "layernorm_fwd";
    if (all_f32(e, {{"out", out.dtype}, {"inp", inp.dtype}}))
      return in().layernorm_fwd_eps(f32(out, e, "out"), mean, rstd, f32(inp, e, "inp"), w, b, N, C,
                                    eps);
    if (cpu_norms()) return cpu::layernorm_fwd(out, mean, rstd, inp, w, b, N, C, eps);
    Widened x(in(), inp, N * C);
    Narrowed y(in(), out, N * C, false);
    in().layernorm_fwd_eps(y.get(), mean, rstd, x.get(), w, b, N, C, eps);
  }
  static void layernorm_bwd(loom_ref dinp, float* dw, float* db, loom_cref dout, loom_cref inp,
                            const float* w, const float* mean, const float* rstd, int64_t N,
                            int64_t C) {
    const char* e = "layernorm_bwd";
    if (all_f32(e, {{"dinp", dinp.dtype}, {"dout", dout.dtype}, {"inp", inp.dtype}}))
      return in().layernorm_bwd(f32(dinp, e, "dinp"), dw, db, f32(dout, e, "dout"),
                                f32(inp, e, "inp"), w, mean, rstd, N, C);
    if (cpu_norms()) return cpu::layernorm_bwd(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
    Widened x(in(), inp, N * C), dy(in(), dout, N * C);
    Narrowed dx(in(), dinp, N * C, false);
    in().layernorm_bwd(dx.get(), dw, db, dy.get(), x.get(), w, mean, rstd, N, C);
  }
  static void rmsnorm_fwd(loom_ref out, float* rstd, loom_cref inp, const float* w, int64_t N,
                          int64_t C, float eps) {
    const char* e = "rmsnorm_fwd";
    if (all_f32(e, {{"out", out.dtype}, {"inp", inp.dtype}}))
      return in().rmsnorm_fwd_eps(f32(out, e, "out"), rstd, f32(inp, e, "inp"), w, N, C, eps);
    if (cpu_norms()) return cpu::rmsnorm_fwd(out, rstd, inp, w, N, C, eps);
    Widened x(in(), inp, N * C);
    Narrowed y(in(), out, N * C, false);
    in().rmsnorm_fwd_eps(y.get(), rstd, x.get(), w, N, C, eps);
  }
  static void rmsnorm_bwd(loom_ref dinp, float* dw, loom_cref dout, loom_cref inp, const float* w,
                          const float* rstd, int64_t N, int64_t C) {
    const char* e = "rmsnorm_bwd";
    if (all_f32(e, {{"dinp", dinp.dtype}, {"dout", dout.dtype}, {"inp", inp.dtype}}))
      return in().rmsnorm_bwd(f32(dinp, e, "dinp"), dw, f32(dout, e, "dout"), f32(inp, e, "inp"), w,
                              rstd, N, C);
    if (cpu_norms()) return cpu::rmsnorm_bwd(dinp, dw, dout, inp, w, rstd, N, C);
    Widened x(in(), inp, N * C), dy(in(), dout, N * C);
    Narrowed dx(in(), dinp, N * C, false);
    in().rmsnorm_bwd(dx.get(), dw, dy.get(), x.get(), w, rstd, N, C);
  }
  // A bias on bf16 rows, on a device the host reaches: the CPU's own kernels, or another
  // device's fp32 kernel on a widened copy.
  static void bias_add(loom_ref out, const float* bias, int64_t N, int64_t C) {
    using Add = decltype(loom_ops_v2::bias_add);
    if (all_f32("bias_add", {{"out", out.dtype}}))
      return in().bias_add(static_cast<float*>(out.data), bias, N, C);
    if (in().bias_add == static_cast<Add>(&cpu::bias_add)) return cpu::bias_add(out, bias, N, C);
    Narrowed y(in(), out, N * C, true);
    in().bias_add(y.get(), bias, N, C);
  }
  static void bias_bwd(float* dbias, loom_cref dout, int64_t N, int64_t C) {
    using Bwd = decltype(loom_ops_v2::bias_bwd);
    if (all_f32("bias_bwd", {{"dout", dout.dtype}}))
      return in().bias_bwd(dbias, static_cast<const float*>(dout.data), N, C);
    if (in().bias_bwd == static_cast<Bwd>(&cpu::bias_bwd)) return cpu::bias_bwd(dbias, dout, N, C);
    Widened dy(in(), dout, N * C);
    in().bias_bwd(dbias, dy.get(), N, C);
  }
  // out = f(inp) and dinp = f'(inp) dout over n elements (ABI 2's unary activation kernels),
  // for fp32 arguments or, on the CPU, bf16 ones.
  static void unary(const char* e, Unary k, loom_ref out, loom_cref inp, int64_t n) {
    if (all_f32(e, {{"out", out.dtype}, {"inp", inp.dtype}}))
      return k(static_cast<float*>(out.data), static_cast<const float*>(inp.data), n);
    if (UnaryTyped own = cpu_typed(k)) return own(out, inp, n);
    Widened x(in(), inp, n);
    Narrowed y(in(), out, n, false);
    k(y.get(), x.get(), n);
  }
  static void unary_bwd(const char* e, UnaryBwd k, loom_ref dinp, loom_cref inp, loom_cref dout,
                        int64_t n) {
    if (all_f32(e, {{"dinp", dinp.dtype}, {"inp", inp.dtype}, {"dout", dout.dtype}}))
      return k(static_cast<float*>(dinp.data), static_cast<const float*>(inp.data),
               static_cast<const float*>(dout.data), n);
    if (UnaryBwdTyped own = cpu_typed(k)) return own(dinp, inp, dout, n);
    Widened x(in(), inp, n), dy(in(), dout, n);
    Narrowed dx(in(), dinp, n, false);
    k(dx.get(), x.get(), dy.get(), n);
  }
  static void gelu_fwd(loom_ref out, loom_cref inp, int64_t n) {
    unary("gelu_fwd", in().gelu_fwd, out, inp, n);
  }
  static void gelu_bwd(loom_ref dinp, loom_cref inp, loom_cref dout, int64_t n) {
    unary_bwd("gelu_bwd", in().gelu_bwd, dinp, inp, dout, n);
  }
  static void gelu_erf_fwd(loom_ref out, loom_cref inp, int64_t n) {
    unary("gelu_erf_fwd", in().gelu_erf_fwd, out, inp, n);
  }
  static void gelu_erf_bwd(loom_ref dinp, loom_cref inp, loom_cref dout, int64_t n) {
    unary_bwd("gelu_erf_bwd", in().gelu_erf_bwd, dinp, inp, dout, n);
  }
  // SwiGLU's rows are [gate | up] (2F) in, F out.
  static void swiglu_fwd(loom_ref out, loom_cref inp, int64_t N, int64_t F) {
    const char* e = "swiglu_fwd";
    if (all_f32(e, {{"out", out.dtype}, {"inp", inp.dtype}}))
      return in().swiglu_fwd(static_cast<float*>(out.data), static_cast<const float*>(inp.data), N,
                             F);
    if (cpu_own(in().swiglu_fwd)) return cpu::swiglu_fwd(out, inp, N, F);
    Widened x(in(), inp, 2 * N * F);
    Narrowed y(in(), out, N * F, false);
    in().swiglu_fwd(y.get(), x.get(), N, F);
  }
  static void swiglu_bwd(loom_ref dinp, loom_cref inp, loom_cref dout, int64_t N, int64_t F) {
    const char* e = "swiglu_bwd";
    if (all_f32(e, {{"dinp", dinp.dtype}, {"inp", inp.dtype}, {"dout", dout.dtype}}))
      return in().swiglu_bwd(static_cast<float*>(dinp.data), static_cast<const float*>(inp.data),
                             static_cast<const float*>(dout.data), N, F);
    if (cpu_own(in().swiglu_bwd)) return cpu::swiglu_bwd(dinp, inp, dout, N, F);
    Widened x(in(), inp, 2 * N * F), dy(in(), dout, N * F);
    Narrowed dx(in(), dinp, 2 * N * F, false);
    in().swiglu_bwd(dx.get(), x.get(), dy.get(), N, F);
  }
  // Attention with any of its tensors bf16, on a device the host reaches: q, k and v go to the
  // CPU's own kernel as they are where all three are bf16 and the kernels are the CPU's, else each
  // is widened; the other tensors are widened, and narrowed back (dq, dk, dv row by row, as they
  // may share rows). Rows of ld elements: the extent of n rows.
  static int64_t extent(int64_t rows, int64_t ld, int64_t width) {
    return rows > 0 ? (rows - 1) * ld + width : 0;
  }
  // q, k and v the CPU's own attention reads in bf16 as they are.
  static bool cpu_reads(loom_cref q, loom_cref k, loom_cref v) {
    using Fwd = decltype(loom_ops_v2::attention_block_fwd);
    using Bwd = decltype(loom_ops_v2::attention_block_bwd);
    return q.dtype == LOOM_BF16 && k.dtype == LOOM_BF16 && v.dtype == LOOM_BF16 &&
           in().attention_block_fwd == static_cast<Fwd>(&cpu::attention_block_fwd) &&
           in().attention_block_bwd == static_cast<Bwd>(&cpu::attention_block_bwd);
  }
  static bool bwd_f32(const char* e, loom_ref dq, loom_ref dk, loom_ref dv, loom_cref dout,
                      loom_cref q, loom_cref k, loom_cref v, loom_cref out) {
    return all_f32(e, {{"dq", dq.dtype},
                       {"dk", dk.dtype},
                       {"dv", dv.dtype},
                       {"dout", dout.dtype},
                       {"q", q.dtype},
                       {"k", k.dtype},
                       {"v", v.dtype},
                       {"out", out.dtype}});
  }
  static void attention_block_fwd(loom_ref out, float* lse, loom_cref q, loom_cref k, loom_cref v,
                                  int64_t ldq, int64_t ldkv, int64_t B, int64_t Tq, int64_t Tk,
                                  int64_t H, int64_t Hkv, int64_t D, const int64_t* qpos,
                                  const int64_t* kpos) {
    const char* e = "attention_block_fwd";
    if (all_f32(e, {{"out", out.dtype}, {"q", q.dtype}, {"k", k.dtype}, {"v", v.dtype}}))
      return in().attention_block_fwd(f32(out, e, "out"), lse, f32(q, e, "q"), f32(k, e, "k"),
                                      f32(v, e, "v"), ldq, ldkv, B, Tq, Tk, H, Hkv, D, qpos, kpos);
    Narrowed o(in(), out, B * Tq * H * D, false);
    if (cpu_reads(q, k, v))
      return cpu::attention_block_fwd(o.get(), lse, q.data, k.data, v.data, LOOM_BF16, ldq, ldkv, B,
                                      Tq, Tk, H, Hkv, D, qpos, kpos);
    const int64_t nkv = extent(B * Tk, ldkv, Hkv * D);
    const Widened wq(in(), q, extent(B * Tq, ldq, H * D)), wk(in(), k, nkv), wv(in(), v, nkv);
    in().attention_block_fwd(o.get(), lse, wq.get(), wk.get(), wv.get(), ldq, ldkv, B, Tq, Tk, H,
                             Hkv, D, qpos, kpos);
  }
  static void attention_block_bwd(loom_ref dq, loom_ref dk, loom_ref dv, loom_cref dout,
                                  loom_cref q, loom_cref k, loom_cref v, loom_cref out,
                                  const float* lse, int64_t ldq, int64_t ldkv, int64_t B,
                                  int64_t Tq, int64_t Tk, int64_t H, int64_t Hkv, int64_t D,
                                  const int64_t* qpos, const int64_t* kpos) {
    const char* e = "attention_block_bwd";
    if (bwd_f32(e, dq, dk, dv, dout, q, k, v, out))
      return in().attention_block_bwd(f32(dq, e, "dq"), f32(dk, e, "dk"), f32(dv, e, "dv"),
                                      f32(dout, e, "dout"), f32(q, e, "q"), f32(k, e, "k"),
                                      f32(v, e, "v"), f32(out, e, "out"), lse, ldq, ldkv, B, Tq, Tk,
                                      H, Hkv, D, qpos, kpos);
    const Widened dy(in(), dout, B * Tq * H * D), o(in(), out, B * Tq * H * D);
    Narrowed gq(in(), dq, B * Tq, ldq, H * D, true), gk(in(), dk, B * Tk, ldkv, Hkv * D, true),
        gv(in(), dv, B * Tk, ldkv, Hkv * D, true);
    if (cpu_reads(q, k, v))
      return cpu::attention_block_bwd(gq.get(), gk.get(), gv.get(), dy.get(), q.data, k.data,
                                      v.data, LOOM_BF16, o.get(), lse, ldq, ldkv, B, Tq, Tk, H, Hkv,
                                      D, qpos, kpos);
    const int64_t nkv = extent(B * Tk, ldkv, Hkv * D);
    const Widened wq(in(), q, extent(B * Tq, ldq, H * D)), wk(in(), k, nkv), wv(in(), v, nkv);
    in().attention_block_bwd(gq.get(), gk.get(), gv.get(), dy.get(), wq.get(), wk.get(), wv.get(),
                             o.get(), lse, ldq, ldkv, B, Tq, Tk, H, Hkv, D, qpos, kpos);
  }
  static void attention_fwd(loom_ref out, float* lse, loom_cref q, loom_cref k, loom_cref v,
                            int64_t ldq, int64_t ldkv, int64_t B, int64_t T, int64_t H, int64_t Hkv,
                            int64_t D) {
    const char* e = "attention_fwd";
    if (all_f32(e, {{"out", out.dtype}, {"q", q.dtype}, {"k", k.dtype}, {"v", v.dtype}}))
      return in().attention_gqa_fwd(static_cast<float*>(out.data), lse,
                                    static_cast<const float*>(q.data),
                                    static_cast<const float*>(k.data),
                                    static_cast<const float*>(v.data), ldq, ldkv, B, T, H, Hkv, D);
    attention_block_fwd(out, lse, q, k, v, ldq, ldkv, B, T, T, H, Hkv, D, nullptr, nullptr);
  }
  static void attention_bwd(loom_ref dq, loom_ref dk, loom_ref dv, loom_cref dout, loom_cref q,
                            loom_cref k, loom_cref v, loom_cref out, const float* lse, int64_t ldq,
                            int64_t ldkv, int64_t B, int64_t T, int64_t H, int64_t Hkv, int64_t D) {
    const char* e = "attention_bwd";
    if (bwd_f32(e, dq, dk, dv, dout, q, k, v, out))
      return in().attention_gqa_bwd(
          static_cast<float*>(dq.data), static_cast<float*>(dk.data), static_cast<float*>(dv.data),
          static_cast<const float*>(dout.data), static_cast<const float*>(q.data),
          static_cast<const float*>(k.data), static_cast<const float*>(v.data),
          static_cast<const float*>(out.data), lse, ldq, ldkv, B, T, H, Hkv, D);
    attention_block_bwd(dq, dk, dv, dout, q, k, v, out, lse, ldq, ldkv, B, T, T, H, Hkv, D, nullptr,
                        nullptr);
  }
  static void attention_merge(loom_ref out, float* lse, loom_cref part, const float* part_lse,
                              int64_t B, int64_t T, int64_t H, int64_t D) {
    if (all_f32("attention_merge", {{"out", out.dtype}, {"part", part.dtype}}))
      return in().attention_merge(static_cast<float*>(out.data), lse,
                                  static_cast<const float*>(part.data), part_lse, B, T, H, D);
    const Widened p(in(), part, B * T * H * D);
    Narrowed o(in(), out, B * T * H * D, true);
    in().attention_merge(o.get(), lse, p.get(), part_lse, B, T, H, D);
  }
  static void rope_fwd(loom_ref x, int64_t ld, int64_t B, int64_t T, int64_t heads, int64_t D,
                       const float* cos, const float* sin, int64_t pos0) {
    in().rope_fwd(f32(x, "rope_fwd", "x"), ld, B, T, heads, D, cos, sin, pos0);
  }
  static void rope_bwd(loom_ref dx, int64_t ld, int64_t B, int64_t T, int64_t heads, int64_t D,
                       const float* cos, const float* sin, int64_t pos0) {
    in().rope_bwd(f32(dx, "rope_bwd", "dx"), ld, B, T, heads, D, cos, sin, pos0);
  }
  static void add(loom_ref y, loom_cref a, loom_cref b, int64_t n) {
    if (all_f32("add", {{"y", y.dtype}, {"a", a.dtype}, {"b", b.dtype}}))
      return in().add(static_cast<float*>(y.data), static_cast<const float*>(a.data),
                      static_cast<const float*>(b.data), n);
    Widened wa(in(), a, n), wb(in(), b, n);
    Narrowed wy(in(), y, n, false);
    in().add(wy.get(), wa.get(), wb.get(), n);
  }
  static void accumulate(loom_ref y, loom_cref x, int64_t n) {
    if (all_f32("accumulate", {{"y", y.dtype}, {"x", x.dtype}}))
      return in().accumulate(static_cast<float*>(y.data), static_cast<const float*>(x.data), n);
    Widened wx(in(), x, n);
    Narrowed wy(in(), y, n, true);
    in().accumulate(wy.get(), wx.get(), n);
  }
  static void scale(loom_ref x, float s, int64_t n) {
    if (all_f32("scale", {{"x", x.dtype}})) return in().scale(static_cast<float*>(x.data), s, n);
    Narrowed wx(in(), x, n, true);
    in().scale(wx.get(), s, n);
  }
  static void sum_squares(int64_t count, const loom_cref* x, const int64_t* n, double* out) {
    std::vector<Widened> w;
    w.reserve(static_cast<size_t>(count));
    std::vector<const float*> p;
    for (int64_t t = 0; t < count; ++t) {
      all_f32("sum_squares", {{"x", x[t].dtype}});
      p.push_back(w.emplace_back(in(), x[t], n[t]).get());
    }
    in().sum_squares_multi(count, p.data(), n, out);
  }
  static void convert(loom_ref dst, loom_cref src, int64_t n, float scale, float* amax,
                      int64_t* clipped) {
    if (src.dtype == LOOM_F32 && dst.dtype == LOOM_BF16) {
      const float* s = static_cast<const float*>(src.data);
      if (in().quantize_into)
        return in().quantize_into(dst.data, LOOM_BF16, s, n, scale, amax, clipped);
      if (scale != 1.f || amax || clipped) refuse_scaled();
      return in().to_bf16(static_cast<uint16_t*>(dst.data), s, n);
    }
    if (src.dtype == LOOM_BF16 && dst.dtype == LOOM_F32) {
      if (amax || clipped) refuse_scaled();
      float* d = static_cast<float*>(dst.data);
      in().from_bf16(d, static_cast<const uint16_t*>(src.data), n);  // exact
      if (scale != 1.f) in().scale(d, scale, n);                     // the one rounding
      return;
    }
    refuse("convert", src.dtype == LOOM_F32 ? "dst" : "src",
           src.dtype == LOOM_F32 ? dst.dtype : src.dtype);
  }
  [[noreturn]] static void refuse_scaled() {
    std::fprintf(stderr,
                 "loom: loom_ops.convert on %s measures amax and clipped only when narrowing, and "
                 "narrows with a scale only where the device has a scaled cast (not CUDA yet)\n",
                 in().device.kind == LOOM_DEVICE_CUDA ? "cuda" : "this device");
    std::abort();
  }
  static void softmax_xent(loom_ref logits, float* losses, const int32_t* targets, int64_t N,
                           int64_t V, int64_t V_real, float dloss) {
    in().softmax_xent(f32(logits, "softmax_xent", "logits"), losses, targets, N, V, V_real, dloss);
  }
  static void row_max(float* mx, loom_cref z, int64_t N, int64_t ld, int64_t cols) {
    in().row_max(mx, f32(z, "row_max", "z"), N, ld, cols);
  }
  static void xent_stats(float* stats, loom_cref z, const int32_t* targets, const float* mx,
                         int64_t N, int64_t ld, int64_t cols, int64_t first) {
    in().xent_stats(stats, f32(z, "xent_stats", "z"), targets, mx, N, ld, cols, first);
  }
  static void xent_grad(loom_ref z, float* losses, const int32_t* targets, const float* mx,
                        const float* stats, int64_t N, int64_t ld, int64_t cols, int64_t first,
                        float dloss) {
    in().xent_grad(f32(z, "xent_grad", "z"), losses, targets, mx, stats, N, ld, cols, first, dloss);
  }
  static void gather_rows(loom_ref dst, loom_cref src, const int32_t* index, int64_t rows,
                          int64_t C) {
    in().gather_rows(f32(dst, "gather_rows", "dst"), f32(src, "gather_rows", "src"), index, rows,
                     C);
  }
  static void combine_rows(loom_ref y, loom_cref rows, const float* w, const int32_t* slot,
                           int64_t N, int64_t K, int64_t C) {
    in().combine_rows(f32(y, "combine_rows", "y"), f32(rows, "combine_rows", "rows"), w, slot, N, K,
                      C);
  }
  static void combine_rows_bwd(loom_ref drows, float* dw, loom_cref dy, loom_cref rows,
                               const float* w, const int32_t* slot, int64_t N, int64_t K,
                               int64_t C) {
    const char* e = "combine_rows_bwd";
    in().combine_rows_bwd(f32(drows, e, "drows"), dw, f32(dy, e, "dy"), f32(rows, e, "rows"), w,
                          slot, N, K, C);
  }

  // Every entry: the device contract and the untyped kernels are the ABI 2 table's own.
  static loom_ops build(const loom_ops_v2& i) {
    loom_ops t{};
    t.v = {LOOM_ABI_MAJOR, LOOM_ABI_MINOR, sizeof(loom_ops)};
    t.device = i.device;
    typed_dtypes(i, t.dtypes);
    t.gemm_native_dtypes = i.gemm_operand_dtypes;
    t.host_reachable = i.host_reachable;
    t.copy = i.copy, t.zero = i.zero, t.set_stream = i.set_stream;
    t.record_event = i.record_event, t.wait_event = i.wait_event, t.sync_event = i.sync_event;
    t.synchronize = i.synchronize, t.pinned_alloc = i.pinned_alloc, t.pinned_free = i.pinned_free;
    t.gemm = &gemm;
    t.embedding_fwd = &embedding_fwd, t.embedding_bwd = &embedding_bwd;
    t.layernorm_fwd = &layernorm_fwd, t.layernorm_bwd = &layernorm_bwd;
    t.rmsnorm_fwd = &rmsnorm_fwd, t.rmsnorm_bwd = &rmsnorm_bwd;
    t.bias_add = &bias_add, t.bias_bwd = &bias_bwd;
    t.gelu_fwd = &gelu_fwd, t.gelu_bwd = &gelu_bwd;
    t.gelu_erf_fwd = &gelu_erf_fwd, t.gelu_erf_bwd = &gelu_erf_bwd;
    t.swiglu_fwd = &swiglu_fwd, t.swiglu_bwd = &swiglu_bwd;
    t.attention_fwd = &attention_fwd, t.attention_bwd = &attention_bwd;
    t.attention_block_fwd = &attention_block_fwd, t.attention_block_bwd = &attention_block_bwd;
    t.attention_merge = &attention_merge;
    t.rope_fwd = &rope_fwd, t.rope_bwd = &rope_bwd;
    t.add = &add, t.accumulate = &accumulate, t.scale = &scale, t.sum_squares = &sum_squares;
    t.convert = &convert, t.quantize = i.quantize;
    t.softmax_xent = &softmax_xent;
    t.row_max = &row_max, t.xent_stats = &xent_stats, t.xent_grad = &xent_grad;
    t.adamw = i.adamw_multi;
    t.encode_blocks = i.encode_blocks, t.decode_blocks = i.decode_blocks;
    t.router_topk = i.router_topk, t.router_topk_bwd = i.router_topk_bwd;
    t.gather_rows = &gather_rows, t.combine_rows = &combine_rows;
    t.combine_rows_bwd = &combine_rows_bwd;
    return t;
  }
};

template <int Kind>
const loom_ops* table_for(const loom_ops_v2* inner) {
  static loom_ops table;
  if (!g_inner[Kind]) {
    g_inner[Kind] = inner;
    table = Typed<Kind>::build(*inner);
  }
  return &table;
}

template <size_t... I>
const loom_ops* table_in_slot(size_t slot, const loom_ops_v2* inner, std::index_sequence<I...>) {
  const loom_ops* t = nullptr;
  ((slot == I ? (t = table_for<static_cast<int>(I)>(inner), 0) : 0), ...);
  return t;
}

}  // namespace

void typed_dtypes(const loom_ops_v2& inner, uint32_t (&dtypes)[LOOM_OP_COUNT]) {
  for (uint32_t& d : dtypes) d = bit(LOOM_F32);
  if (inner.gemm_typed) dtypes[LOOM_OP_GEMM] |= bit(LOOM_BF16);
  dtypes[LOOM_OP_CONVERT] |= bit(LOOM_BF16);
  if (inner.host_reachable)  // the bf16 forms widen and round on the host
    for (int op :
         {LOOM_OP_NORM, LOOM_OP_BIAS, LOOM_OP_ELEMENTWISE, LOOM_OP_ACTIVATION, LOOM_OP_ATTENTION})
      dtypes[op] |= bit(LOOM_BF16);
}

const loom_ops* typed(const loom_ops_v2* inner) {
  if (!inner) return nullptr;
  static std::mutex m;
  std::lock_guard<std::mutex> lock(m);
  for (size_t slot = 0; slot < kSlots; ++slot)
    if (!g_inner[slot] || g_inner[slot] == inner)
      return table_in_slot(slot, inner, std::make_index_sequence<kSlots>());
  std::fprintf(stderr, "loom: more than %d op tables asked for a typed table\n", kSlots);
  std::abort();
}

}  // namespace loom::ops
