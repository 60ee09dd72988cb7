#include "ops/strict/table.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "ops/cpu/kernels.hpp"
#include "ops/kernel_entries.hpp"
#include "ops/strict/launch.hpp"
#include "ops/strict/routing.hpp"
#include "ops/strict/streams.hpp"
#include "tensor/tensor.hpp"

namespace loom::strict {

namespace {

void gemm(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
          const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  Launch L("gemm");
  const float* a = R(A, ta ? span(K, lda, M) : span(M, lda, K));
  const float* b = R(B, tb ? span(N, ldb, K) : span(K, ldb, N));
  float* c = W(C, span(M, ldc, N));
  L.run([=] { cpu::gemm(ta, tb, M, N, K, alpha, a, lda, b, ldb, beta, c, ldc); });
}

void embedding_fwd(float* out, const int32_t* tokens, const float* wte, const float* wpe, int64_t B,
                   int64_t T, int64_t C) {
  Launch L("embedding_fwd");
  float* o = W(out, floats(B * T * C));
  const int32_t* tok = L.staged(tokens, B * T * sizeof(int32_t), false, "tokens");
  const float* e = R(wte, to_block_end(wte));
  const float* p = R(wpe, floats(T * C));
  L.run([=] { cpu::embedding_fwd(o, tok, e, p, B, T, C); });
}

void embedding_bwd(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int64_t B,
                   int64_t T, int64_t C) {
  Launch L("embedding_bwd");
  float* de = W(dwte, to_block_end(dwte));
  float* dp = W(dwpe, floats(T * C));
  const float* d = R(dout, floats(B * T * C));
  const int32_t* tok = L.staged(tokens, B * T * sizeof(int32_t), false, "tokens");
  L.run([=] { cpu::embedding_bwd(de, dp, d, tok, B, T, C); });
}

void layernorm_fwd_eps(float* out, float* mean, float* rstd, const float* inp, const float* w,
                       const float* b, int64_t N, int64_t C, float eps) {
  Launch L("layernorm_fwd");
  float* o = W(out, floats(N * C));
  float* mu = W(mean, floats(N));
  float* rs = W(rstd, floats(N));
  const float* x = R(inp, floats(N * C));
  const float* wt = R(w, floats(C));
  const float* bs = R(b, floats(C));
  L.run([=] { cpu::layernorm_fwd_eps(o, mu, rs, x, wt, bs, N, C, eps); });
}

void layernorm_fwd(float* out, float* mean, float* rstd, const float* inp, const float* w,
                   const float* b, int64_t N, int64_t C) {
  layernorm_fwd_eps(out, mean, rstd, inp, w, b, N, C, 1e-5f);
}

void layernorm_bwd(float* dinp, float* dw, float* db, const float* dout, const float* inp,
                   const float* w, const float* mean, const float* rstd, int64_t N, int64_t C) {
  Launch L("layernorm_bwd");
  float* dx = W(dinp, floats(N * C));
  float* dwt = W(dw, floats(C));
  float* dbs = W(db, floats(C));
  const float* d = R(dout, floats(N * C));
  const float* x = R(inp, floats(N * C));
  const float* wt = R(w, floats(C));
  const float* mu = R(mean, floats(N));
  const float* rs = R(rstd, floats(N));
  L.run([=] { cpu::layernorm_bwd(dx, dwt, dbs, d, x, wt, mu, rs, N, C); });
}

void rmsnorm_fwd_eps(float* out, float* rstd, const float* inp, const float* w, int64_t N,
                     int64_t C, float eps) {
  Launch L("rmsnorm_fwd");
  float* o = W(out, floats(N * C));
  float* rs = W(rstd, floats(N));
  const float* x = R(inp, floats(N * C));
  const float* wt = R(w, floats(C));
  L.run([=] { cpu::rmsnorm_fwd_eps(o, rs, x, wt, N, C, eps); });
}

void rmsnorm_fwd(float* out, float* rstd, const float* inp, const float* w, int64_t N, int64_t C) {
  rmsnorm_fwd_eps(out, rstd, inp, w, N, C, 1e-5f);
}

void rmsnorm_bwd(float* dinp, float* dw, const float* dout, const float* inp, const float* w,
                 const float* rstd, int64_t N, int64_t C) {
  Launch L("rmsnorm_bwd");
  float* dx = W(dinp, floats(N * C));
  float* dwt = W(dw, floats(C));
  const float* d = R(dout, floats(N * C));
  const float* x = R(inp, floats(N * C));
  const float* wt = R(w, floats(C));
  const float* rs = R(rstd, floats(N));
  L.run([=] { cpu::rmsnorm_bwd(dx, dwt, d, x, wt, rs, N, C); });
}

void bias_add(float* out, const float* bias, int64_t N, int64_t C) {
  Launch L("bias_add");
  float* o = W(out, floats(N * C));
  const float* b = R(bias, floats(C));
  L.run([=] { cpu::bias_add(o, b, N, C); });
}

void bias_bwd(float* dbias, const float* dout, int64_t N, int64_t C) {
  Launch L("bias_bwd");
  float* db = W(dbias, floats(C));
  const float* d = R(dout, floats(N * C));
  L.run([=] { cpu::bias_bwd(db, d, N, C); });
}

// The elementwise kernels of one input (or an input and its gradient) over n floats.
template <void (*Fwd)(float*, const float*, int64_t)>
void unary_fwd(const char* op, float* out, const float* inp, int64_t n) {
  Launch L(op);
  float* o = W(out, floats(n));
  const float* x = R(inp, floats(n));
  L.run([=] { Fwd(o, x, n); });
}
template <void (*Bwd)(float*, const float*, const float*, int64_t)>
void unary_bwd(const char* op, float* dinp, const float* inp, const float* dout, int64_t n) {
  Launch L(op);
  float* dx = W(dinp, floats(n));
  const float* x = R(inp, floats(n));
  const float* d = R(dout, floats(n));
  L.run([=] { Bwd(dx, x, d, n); });
}
void gelu_fwd(float* o, const float* x, int64_t n) {
  unary_fwd<cpu::gelu_fwd>("gelu_fwd", o, x, n);
}
void gelu_bwd(float* dx, const float* x, const float* d, int64_t n) {
  unary_bwd<cpu::gelu_bwd>("gelu_bwd", dx, x, d, n);
}
void gelu_erf_fwd(float* o, const float* x, int64_t n) {
  unary_fwd<cpu::gelu_erf_fwd>("gelu_erf_fwd", o, x, n);
}
void gelu_erf_bwd(float* dx, const float* x, const float* d, int64_t n) {
  unary_bwd<cpu::gelu_erf_bwd>("gelu_erf_bwd", dx, x, d, n);
}

void swiglu_fwd(float* out, const float* inp, int64_t N, int64_t F) {
  Launch L("swiglu_fwd");
  float* o = W(out, floats(N * F));
  const float* x = R(inp, floats(2 * N * F));
  L.run([=] { cpu::swiglu_fwd(o, x, N, F); });
}

void swiglu_bwd(float* dinp, const float* inp, const float* dout, int64_t N, int64_t F) {
  Launch L("swiglu_bwd");
  float* dx = W(dinp, floats(2 * N * F));
  const float* x = R(inp, floats(2 * N * F));
  const float* d = R(dout, floats(N * F));
  L.run([=] { cpu::swiglu_bwd(dx, x, d, N, F); });
}

void attention_fwd(float* out, float* lse, const float* qkv, int64_t B, int64_t T, int64_t H,
                   int64_t D) {
  Launch L("attention_fwd");
  float* o = W(out, floats(B * T * H * D));
  float* l = W(lse, floats(B * H * T));
  const float* x = R(qkv, floats(B * T * 3 * H * D));
  L.run([=] { cpu::attention_fwd(o, l, x, B, T, H, D); });
}

void attention_bwd(float* dqkv, const float* dout, const float* qkv, const float* out,
                   const float* lse, int64_t B, int64_t T, int64_t H, int64_t D) {
  Launch L("attention_bwd");
  float* dx = W(dqkv, floats(B * T * 3 * H * D));
  const float* d = R(dout, floats(B * T * H * D));
  const float* x = R(qkv, floats(B * T * 3 * H * D));
  const float* o = R(out, floats(B * T * H * D));
  const float* l = R(lse, floats(B * H * T));
  L.run([=] { cpu::attention_bwd(dx, d, x, o, l, B, T, H, D); });
}

// q rows are ldq apart (H heads of D), k and v rows ldkv apart (Hkv heads of D).
struct GqaShape {
  int64_t ldq, ldkv, B, Tq, Tk, H, Hkv, D;
  size_t q() const { return span(B * Tq, ldq, H * D); }
  size_t kv() const { return span(B * Tk, ldkv, Hkv * D); }
  size_t out() const { return floats(B * Tq * H * D); }
  size_t lse() const { return floats(B * H * Tq); }
};

void attention_gqa_fwd(float* out, float* lse, const float* q, const float* k, const float* v,
                       int64_t ldq, int64_t ldkv, int64_t B, int64_t T, int64_t H, int64_t Hkv,
                       int64_t D) {
  const GqaShape s{ldq, ldkv, B, T, T, H, Hkv, D};
  Launch L("attention_gqa_fwd");
  float* o = W(out, s.out());
  float* l = W(lse, s.lse());
  const float* qq = R(q, s.q());
  const float* kk = R(k, s.kv());
  const float* vv = R(v, s.kv());
  L.run([=] { cpu::attention_gqa_fwd(o, l, qq, kk, vv, ldq, ldkv, B, T, H, Hkv, D); });
}

void attention_gqa_bwd(float* dq, float* dk, float* dv, const float* dout, const float* q,
                       const float* k, const float* v, const float* out, const float* lse,
                       int64_t ldq, int64_t ldkv, int64_t B, int64_t T, int64_t H, int64_t Hkv,
                       int64_t D) {
  const GqaShape s{ldq, ldkv, B, T, T, H, Hkv, D};
  Launch L("attention_gqa_bwd");
  float* dqq = W(dq, s.q());
  float* dkk = W(dk, s.kv());
  float* dvv = W(dv, s.kv());
  const float* d = R(dout, s.out());
  const float* qq = R(q, s.q());
  const float* kk = R(k, s.kv());
  const float* vv = R(v, s.kv());
  const float* o = R(out, s.out());
  const float* l = R(lse, s.lse());
  L.run([=] {
    cpu::attention_gqa_bwd(dqq, dkk, dvv, d, qq, kk, vv, o, l, ldq, ldkv, B, T, H, Hkv, D);
  });
}

void attention_block_fwd(float* out, float* lse, const float* q, const float* k, const float* v,
                         int64_t ldq, int64_t ldkv, int64_t B, int64_t Tq, int64_t Tk, int64_t H,
                         int64_t Hkv, int64_t D, const int64_t* qpos, const int64_t* kpos) {
  const GqaShape s{ldq, ldkv, B, Tq, Tk, H, Hkv, D};
  Launch L("attention_block_fwd");
  float* o = W(out, s.out());
  float* l = W(lse, s.lse());
  const float* qq = R(q, s.q());
  const float* kk = R(k, s.kv());
  const float* vv = R(v, s.kv());
  const int64_t* qp = L.staged(qpos, Tq * sizeof(int64_t), false, "qpos");
  const int64_t* kp = L.staged(kpos, Tk * sizeof(int64_t), false, "kpos");
  L.run(
      [=] { cpu::attention_block_fwd(o, l, qq, kk, vv, ldq, ldkv, B, Tq, Tk, H, Hkv, D, qp, kp); });
}

void attention_block_bwd(float* dq, float* dk, float* dv, const float* dout, const float* q,
                         const float* k, const float* v, const float* out, const float* lse,
                         int64_t ldq, int64_t ldkv, int64_t B, int64_t Tq, int64_t Tk, int64_t H,
                         int64_t Hkv, int64_t D, const int64_t* qpos, const int64_t* kpos) {
  const GqaShape s{ldq, ldkv, B, Tq, Tk, H, Hkv, D};
  Launch L("attention_block_bwd");
  float* dqq = W(dq, s.q());
  float* dkk = W(dk, s.kv());
  float* dvv = W(dv, s.kv());
  const float* d = R(dout, s.out());
  const float* qq = R(q, s.q());
  const float* kk = R(k, s.kv());
  const float* vv = R(v, s.kv());
  const float* o = R(out, s.out());
  const float* l = R(lse, s.lse());
  const int64_t* qp = L.staged(qpos, Tq * sizeof(int64_t), false, "qpos");
  const int64_t* kp = L.staged(kpos, Tk * sizeof(int64_t), false, "kpos");
  L.run([=] {
    cpu::attention_block_bwd(dqq, dkk, dvv, d, qq, kk, vv, o, l, ldq, ldkv, B, Tq, Tk, H, Hkv, D,
                             qp, kp);
  });
}

void attention_merge(float* out, float* lse, const float* part, const float* part_lse, int64_t B,
                     int64_t T, int64_t H, int64_t D) {
  Launch L("attention_merge");
  float* o = W(out, floats(B * T * H * D));
  float* l = W(lse, floats(B * H * T));
  const float* p = R(part, floats(B * T * H * D));
  const float* pl = R(part_lse, floats(B * H * T));
  L.run([=] { cpu::attention_merge(o, l, p, pl, B, T, H, D); });
}

template <void (*Rope)(float*, int64_t, int64_t, int64_t, int64_t, int64_t, const float*,
                       const float*, int64_t)>
void rope(const char* op, float* x, int64_t ld, int64_t B, int64_t T, int64_t heads, int64_t D,
          const float* cos, const float* sin, int64_t pos0) {
  Launch L(op);
  float* xx = W(x, span(B * T, ld, heads * D));
  const size_t table = floats((pos0 + T) * D / 2);
  const float* c = L.staged(cos, table, false, "cos");
  const float* s = L.staged(sin, table, false, "sin");
  L.run([=] { Rope(xx, ld, B, T, heads, D, c, s, pos0); });
}
void rope_fwd(float* x, int64_t ld, int64_t B, int64_t T, int64_t h, int64_t D, const float* c,
              const float* s, int64_t p0) {
  rope<cpu::rope_fwd>("rope_fwd", x, ld, B, T, h, D, c, s, p0);
}
void rope_bwd(float* x, int64_t ld, int64_t B, int64_t T, int64_t h, int64_t D, const float* c,
              const float* s, int64_t p0) {
  rope<cpu::rope_bwd>("rope_bwd", x, ld, B, T, h, D, c, s, p0);
}

void add(float* y, const float* a, const float* b, int64_t n) {
  Launch L("add");
  float* yy = W(y, floats(n));
  const float* aa = R(a, floats(n));
  const float* bb = R(b, floats(n));
  L.run([=] { cpu::add(yy, aa, bb, n); });
}

void accumulate(float* y, const float* x, int64_t n) {
  Launch L("accumulate");
  float* yy = W(y, floats(n));
  const float* xx = R(x, floats(n));
  L.run([=] { cpu::accumulate(yy, xx, n); });
}

void scale(float* x, float s, int64_t n) {
  Launch L("scale");
  float* xx = W(x, floats(n));
  L.run([=] { cpu::scale(xx, s, n); });
}

// Returns a value, so the host waits for it (a GPU copies the result back and synchronises).
double sum_squares(const float* x, int64_t n) {
  Launch L("sum_squares");
  const float* xx = R(x, floats(n));
  double result = 0;
  double* into = &result;
  L.wait();
  L.run([=] { *into = cpu::sum_squares(xx, n); });
  return result;
}

// One queued kernel over every tensor, and one host wait for the sums.
void sum_squares_multi(int64_t count, const float* const* x, const int64_t* n, double* out) {
  Launch L("sum_squares_multi");
  std::vector<const float*> xs(static_cast<size_t>(count));
  std::vector<int64_t> ns(n, n + count);
  for (int64_t t = 0; t < count; ++t) xs[t] = L.device(x[t], floats(n[t]), false, "x[t]");
  double* into = L.staged(out, static_cast<size_t>(count) * sizeof(double), true, "out");
  L.run([=] { cpu::sum_squares_multi(count, xs.data(), ns.data(), into); });
}

void softmax_xent(float* logits, float* losses, const int32_t* targets, int64_t N, int64_t V,
                  int64_t V_real, float dloss) {
  Launch L("softmax_xent");
  float* lg = W(logits, floats(N * V));
  float* ls = L.staged(losses, floats(N), true, "losses");
  const int32_t* tg = L.staged(targets, N * sizeof(int32_t), false, "targets");
  L.run([=] { cpu::softmax_xent(lg, ls, tg, N, V, V_real, dloss); });
}

void adamw(float* param, const float* grad, float* m, float* v, int64_t n, float lr, float beta1,
           float beta2, float eps, float weight_decay, int64_t step) {
  Launch L("adamw");
  float* p = W(param, floats(n));
  const float* g = R(grad, floats(n));
  float* mm = W(m, floats(n));
  float* vv = W(v, floats(n));
  L.run([=] { cpu::adamw(p, g, mm, vv, n, lr, beta1, beta2, eps, weight_decay, step); });
}

// One queued kernel per tensor, each declaring what it reads and writes.
void adamw_multi(int64_t count, float* const* params, const float* const* grads, float* const* m,
                 float* const* v, const int64_t* numel, const float* weight_decay, float lr,
                 float beta1, float beta2, float eps, int64_t step) {
  for (int64_t t = 0; t < count; ++t)
    adamw(params[t], grads[t], m[t], v[t], numel[t], lr, beta1, beta2, eps, weight_decay[t], step);
}

void quantize(float* x, int64_t n, int32_t dtype, float scale, float* amax, int64_t* clipped) {
  Launch L("quantize");
  float* xx = W(x, floats(n));
  float* am = L.staged(amax, kF, true, "amax");
  int64_t* cl = L.staged(clipped, sizeof(int64_t), true, "clipped");
  L.run([=] { cpu::quantize(xx, n, dtype, scale, am, cl); });
}

// Narrow GEMM operands: the CPU's kernels over device memory, so a bf16 run has the CPU's bits.
void quantize_into(void* dst, int32_t dtype, const float* src, int64_t n, float scale, float* amax,
                   int64_t* clipped) {
  Launch L("quantize_into");
  void* d = W(dst, n <= 0 ? 0 : static_cast<size_t>(n) * 2);
  const float* x = R(src, floats(n));
  float* am = L.staged(amax, kF, true, "amax");
  int64_t* cl = L.staged(clipped, sizeof(int64_t), true, "clipped");
  L.run([=] { cpu::quantize_into(d, dtype, x, n, scale, am, cl); });
}

void gemm_typed(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const void* A,
                int32_t a_dtype, int64_t lda, const void* B, int32_t b_dtype, int64_t ldb,
                float beta, float* C, int64_t ldc) {
  Launch L("gemm_typed");
  const size_t ea = dtype_size(static_cast<loom_dtype>(a_dtype)),
               eb = dtype_size(static_cast<loom_dtype>(b_dtype));
  const void* a = R(A, ta ? span(K, lda, M, ea) : span(M, lda, K, ea));
  const void* b = R(B, tb ? span(N, ldb, K, eb) : span(K, ldb, N, eb));
  float* c = W(C, span(M, ldc, N));
  L.run([=] {
    cpu::gemm_typed(ta, tb, M, N, K, alpha, a, a_dtype, lda, b, b_dtype, ldb, beta, c, ldc);
  });
}

// The wire codecs: each reads and writes only device memory (a plugin's buffers).
void to_bf16(uint16_t* dst, const float* src, int64_t n) {
  Launch L("to_bf16");
  uint16_t* d = W(dst, n <= 0 ? 0 : static_cast<size_t>(n) * 2);
  const float* x = R(src, floats(n));
  L.run([=] { cpu::to_bf16(d, x, n); });
}

void from_bf16(float* dst, const uint16_t* src, int64_t n) {
  Launch L("from_bf16");
  float* d = W(dst, floats(n));
  const uint16_t* x = R(src, n <= 0 ? 0 : static_cast<size_t>(n) * 2);
  L.run([=] { cpu::from_bf16(d, x, n); });
}

size_t block_span(int64_t width, int64_t blocks) {
  return blocks <= 0 ? 0 : static_cast<size_t>(blocks * (4 + width));
}

void encode_blocks(uint8_t* dst, const float* src, int64_t count, int64_t width, int64_t blocks) {
  Launch L("encode_blocks");
  uint8_t* d = W(dst, block_span(width, blocks));
  const float* x = R(src, floats(std::min(count, width * blocks)));
  L.run([=] { cpu::encode_blocks(d, x, count, width, blocks); });
}

void decode_blocks(float* dst, const uint8_t* src, int64_t count, int64_t width, int64_t blocks,
                   int32_t flags) {
  Launch L("decode_blocks");
  const bool sum = flags & LOOM_BLOCKS_SUM;
  float* d = W(dst, floats(sum ? std::min(count, width) : std::min(count, width * blocks)));
  const uint8_t* x = R(src, block_span(width, blocks));
  L.run([=] { cpu::decode_blocks(d, x, count, width, blocks, flags); });
}

// The vocab-parallel loss: the logits stay on the device; targets are staged, the per-row
// losses come back to the host (a wait, as softmax_xent's).
void row_max(float* mx, const float* z, int64_t N, int64_t ld, int64_t cols) {
  Launch L("row_max");
  float* m = W(mx, floats(N));
  const float* zz = R(z, N > 0 ? span(N, ld, cols) : 0);
  L.run([=] { cpu::row_max(m, zz, N, ld, cols); });
}

void xent_stats(float* stats, const float* z, const int32_t* targets, const float* mx, int64_t N,
                int64_t ld, int64_t cols, int64_t first) {
  Launch L("xent_stats");
  float* st = W(stats, floats(2 * N));
  const float* zz = R(z, N > 0 ? span(N, ld, ld) : 0);
  const int32_t* tg = L.staged(targets, N * sizeof(int32_t), false, "targets");
  const float* m = R(mx, floats(N));
  L.run([=] { cpu::xent_stats(st, zz, tg, m, N, ld, cols, first); });
}

void xent_grad(float* z, float* losses, const int32_t* targets, const float* mx, const float* stats,
               int64_t N, int64_t ld, int64_t cols, int64_t first, float dloss) {
  Launch L("xent_grad");
  float* zz =
      L.device(z, N > 0 ? span(N, ld, ld) : 0, dloss != 0.f, "z");  // written only for a gradient
  float* ls = L.staged(losses, floats(N), true, "losses");
  const int32_t* tg = L.staged(targets, N * sizeof(int32_t), false, "targets");
  const float* m = R(mx, floats(N));
  const float* st = R(stats, floats(2 * N));
  L.run([=] { cpu::xent_grad(zz, ls, tg, m, st, N, ld, cols, first, dloss); });
}

#undef R
#undef W

// ---- the device contract: copies, streams, events ----

// A copy that uses a pinned block (already pinned): queued, and unpinned once the host has seen
// it finish, or at once when it could not be queued.
template <class F>
void run_pinned(Launch& L, F work, char* pinned, size_t pinned_bytes, bool writes) {
  try {
    L.run(std::move(work));
  } catch (...) {
    unpin_after_copy(pinned, pinned_bytes, writes);
    throw;
  }
  on_host_sees_current([=] { unpin_after_copy(pinned, pinned_bytes, writes); });
}

// Bytes copy() moved out of device memory on the compute stream (host_read_bytes).
std::atomic<int64_t> g_host_read_bytes{0};

// Host to device from pageable memory takes the bytes at once, as cudaMemcpyAsync does; from a
// pinned block the copy reads it later, so the block is read-only until the host has seen the
// copy finish. Device to pageable host waits; to a pinned block it does not, and the block is
// unreadable until the host has waited for the copy.
void copy(void* dst, const void* src, int64_t n) {
  if (n <= 0) return;
  const size_t bytes = static_cast<size_t>(n);
  const bool to_device = is_device(dst), from_device = is_device(src);
  char* pinned = nullptr;
  size_t pinned_bytes = 0;
  Launch L("copy");
  void* d = to_device ? L.device(dst, bytes, true, "dst") : dst;
  const void* s = from_device ? L.device(src, bytes, false, "src") : src;
  if (!to_device && !from_device) {
    std::memcpy(dst, src, bytes);
    return;
  }
  if (!from_device) {
    if (find_pinned(src, &pinned, &pinned_bytes)) {
      pin_for_copy(pinned, pinned_bytes, false);
      run_pinned(
          L, [=] { std::memcpy(d, kernel_view(s), bytes); }, pinned, pinned_bytes, false);
      return;
    }
    std::vector<char> taken(static_cast<const char*>(src), static_cast<const char*>(src) + bytes);
    L.run([d, taken = std::move(taken)] { std::memcpy(d, taken.data(), taken.size()); });
    return;
  }
  if (!to_device && current_stream() == LOOM_STREAM_COMPUTE)
    g_host_read_bytes.fetch_add(n, std::memory_order_relaxed);
  if (!to_device && find_pinned(dst, &pinned, &pinned_bytes)) {
    pin_for_copy(pinned, pinned_bytes, true);
    void* k = kernel_view(dst);
    run_pinned(
        L, [=] { std::memcpy(k, s, bytes); }, pinned, pinned_bytes, true);
    return;
  }
  if (!to_device) L.wait();
  L.run([=] { std::memcpy(d, s, bytes); });
}

void zero(void* dst, int64_t n) {
  if (n <= 0) return;
  if (!is_device(dst)) {
    std::memset(dst, 0, static_cast<size_t>(n));
    return;
  }
  Launch L("zero");
  void* d = L.device(dst, static_cast<size_t>(n), true, "dst");
  L.run([=] { std::memset(d, 0, static_cast<size_t>(n)); });
}

void set_stream_entry(int32_t stream) {
  if (stream != LOOM_STREAM_COMPUTE && stream != LOOM_STREAM_COMM)
    contract_broken("set_stream(" + std::to_string(stream) + ") from " + calling_code() +
                    ": the streams are LOOM_STREAM_COMPUTE and LOOM_STREAM_COMM");
  set_stream(stream);
}

void* pinned_alloc_entry(int64_t bytes) {
  return pinned_alloc(bytes > 0 ? static_cast<size_t>(bytes) : 1);
}

void pinned_free_entry(void* p) {
  if (p && pinned_in_flight(p))
    contract_broken("pinned_free from " + calling_code() +
                    " of a pinned block that a copy still uses: wait for the copy (sync_event) "
                    "before freeing it");
  pinned_free(p);
}

}  // namespace

int64_t host_read_bytes() { return g_host_read_bytes.load(std::memory_order_relaxed); }

const loom_ops_v2* ops() {
  install_fault_handler();
  static const loom_ops_v2 table = [] {
    loom_ops_v2 t{};
    t.v = LOOM_OPS_V2_VERSION;
    t.device = {LOOM_DEVICE_STRICT, 0};
    LOOM_OPS_KERNEL_ENTRIES(t, loom::strict);
    LOOM_OPS_CONTRACT_ENTRIES(t, loom::strict);
    t.gemm_operand_dtypes = cpu::gemm_operand_dtypes();
    t.quantize_into = &quantize_into;
    t.gemm_typed = &gemm_typed;
    return t;
  }();
  return &table;
}

}  // namespace loom::strict
