// CPU kernels behind the op table (loom_ops_v2, tensor/ops_v2.h). Each function does one thing; the
// math is in a comment above its definition. OpenMP parallelises over rows or (batch, head) pairs;
// GEMMs go to OpenBLAS.
#pragma once

#include <loom/ops.h>
#include <loom/plugin.h>

#include <cstdint>
#include <vector>

#include "tensor/ops_v2.h"

namespace loom::cpu {

void gemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

void embedding_fwd(float* out, const int32_t* tokens, const float* wte, const float* wpe, int64_t B,
                   int64_t T, int64_t C);
void embedding_bwd(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int64_t B,
                   int64_t T, int64_t C);

void layernorm_fwd(float* out, float* mean, float* rstd, const float* inp, const float* w,
                   const float* b, int64_t N, int64_t C);
void layernorm_bwd(float* dinp, float* dw, float* db, const float* dout, const float* inp,
                   const float* w, const float* mean, const float* rstd, int64_t N, int64_t C);
void rmsnorm_fwd(float* out, float* rstd, const float* inp, const float* w, int64_t N, int64_t C);
void layernorm_fwd_eps(float* out, float* mean, float* rstd, const float* inp, const float* w,
                       const float* b, int64_t N, int64_t C, float eps);
void rmsnorm_fwd_eps(float* out, float* rstd, const float* inp, const float* w, int64_t N,
                     int64_t C, float eps);
void rmsnorm_bwd(float* dinp, float* dw, const float* dout, const float* inp, const float* w,
                 const float* rstd, int64_t N, int64_t C);
// The same norms on typed tensors, each fp32 or bf16 (norms.cpp), as the activations below.
void layernorm_fwd(loom_ref out, float* mean, float* rstd, loom_cref inp, const float* w,
                   const float* b, int64_t N, int64_t C, float eps);
void layernorm_bwd(loom_ref dinp, float* dw, float* db, loom_cref dout, loom_cref inp,
                   const float* w, const float* mean, const float* rstd, int64_t N, int64_t C);
void rmsnorm_fwd(loom_ref out, float* rstd, loom_cref inp, const float* w, int64_t N, int64_t C,
                 float eps);
void rmsnorm_bwd(loom_ref dinp, float* dw, loom_cref dout, loom_cref inp, const float* w,
                 const float* rstd, int64_t N, int64_t C);

void bias_add(float* out, const float* bias, int64_t N, int64_t C);
void bias_bwd(float* dbias, const float* dout, int64_t N, int64_t C);
void bias_add(loom_ref out, const float* bias, int64_t N, int64_t C);  // fp32 or bf16 (typed)
void bias_bwd(float* dbias, loom_cref dout, int64_t N, int64_t C);
void gelu_fwd(float* out, const float* inp, int64_t n);
void gelu_bwd(float* dinp, const float* inp, const float* dout, int64_t n);
void gelu_erf_fwd(float* out, const float* inp, int64_t n);
void gelu_erf_bwd(float* dinp, const float* inp, const float* dout, int64_t n);
void swiglu_fwd(float* out, const float* inp, int64_t N, int64_t F);
void swiglu_bwd(float* dinp, const float* inp, const float* dout, int64_t N, int64_t F);
// The same activations on typed tensors, each fp32 or bf16 (activations.cpp): the fp32 kernels'
// arithmetic, each bf16 value widened as it is loaded and rounded once as it is stored.
void gelu_fwd(loom_ref out, loom_cref inp, int64_t n);
void gelu_bwd(loom_ref dinp, loom_cref inp, loom_cref dout, int64_t n);
void gelu_erf_fwd(loom_ref out, loom_cref inp, int64_t n);
void gelu_erf_bwd(loom_ref dinp, loom_cref inp, loom_cref dout, int64_t n);
void swiglu_fwd(loom_ref out, loom_cref inp, int64_t N, int64_t F);
void swiglu_bwd(loom_ref dinp, loom_cref inp, loom_cref dout, int64_t N, int64_t F);

void attention_fwd(float* out, float* lse, const float* qkv, int64_t B, int64_t T, int64_t H,
                   int64_t D);
void attention_bwd(float* dqkv, const float* dout, const float* qkv, const float* out,
                   const float* lse, int64_t B, int64_t T, int64_t H, int64_t D);
void attention_gqa_fwd(float* out, float* lse, const float* q, const float* k, const float* v,
                       int64_t ldq, int64_t ldkv, int64_t B, int64_t T, int64_t H, int64_t Hkv,
                       int64_t D);
void attention_gqa_bwd(float* dq, float* dk, float* dv, const float* dout, const float* q,
                       const float* k, const float* v, const float* out, const float* lse,
                       int64_t ldq, int64_t ldkv, int64_t B, int64_t T, int64_t H, int64_t Hkv,
                       int64_t D);
void attention_block_fwd(float* out, float* lse, const float* q, const float* k, const float* v,
                         int64_t ldq, int64_t ldkv, int64_t B, int64_t Tq, int64_t Tk, int64_t H,
                         int64_t Hkv, int64_t D, const int64_t* qpos, const int64_t* kpos);
void attention_block_bwd(float* dq, float* dk, float* dv, const float* dout, const float* q,
                         const float* k, const float* v, const float* out, const float* lse,
                         int64_t ldq, int64_t ldkv, int64_t B, int64_t Tq, int64_t Tk, int64_t H,
                         int64_t Hkv, int64_t D, const int64_t* qpos, const int64_t* kpos);
// The same with q, k and v in fp32 or bf16 (`qkv_dtype`, all three alike): a bf16 head is
// widened into the thread's own rows as it is reached, so the result is the fp32 kernel's on the
// stored values, without an fp32 copy of q, k and v.
void attention_block_fwd(float* out, float* lse, const void* q, const void* k, const void* v,
                         int32_t qkv_dtype, int64_t ldq, int64_t ldkv, int64_t B, int64_t Tq,
                         int64_t Tk, int64_t H, int64_t Hkv, int64_t D, const int64_t* qpos,
                         const int64_t* kpos);
void attention_block_bwd(float* dq, float* dk, float* dv, const float* dout, const void* q,
                         const void* k, const void* v, int32_t qkv_dtype, const float* out,
                         const float* lse, int64_t ldq, int64_t ldkv, int64_t B, int64_t Tq,
                         int64_t Tk, int64_t H, int64_t Hkv, int64_t D, const int64_t* qpos,
                         const int64_t* kpos);
void attention_merge(float* out, float* lse, const float* part, const float* part_lse, int64_t B,
                     int64_t T, int64_t H, int64_t D);
void rope_fwd(float* x, int64_t ld, int64_t B, int64_t T, int64_t heads, int64_t D,
              const float* cos, const float* sin, int64_t pos0);
void rope_bwd(float* dx, int64_t ld, int64_t B, int64_t T, int64_t heads, int64_t D,
              const float* cos, const float* sin, int64_t pos0);
// The textbook version that materialises the T x T probabilities: the tests' reference and the
// bench's baseline. `probs` holds B*H*T*T floats, saved for backward.
void attention_naive_fwd(float* out, float* probs, const float* qkv, int64_t B, int64_t T,
                         int64_t H, int64_t D);
void attention_naive_bwd(float* dqkv, const float* dout, const float* qkv, const float* probs,
                         int64_t B, int64_t T, int64_t H, int64_t D);

void add(float* y, const float* a, const float* b, int64_t n);
void accumulate(float* y, const float* x, int64_t n);
void scale(float* x, float s, int64_t n);
double sum_squares(const float* x, int64_t n);

void softmax_xent(float* logits, float* losses, const int32_t* targets, int64_t N, int64_t V,
                  int64_t V_real, float dloss);

void adamw(float* param, const float* grad, float* m, float* v, int64_t n, float lr, float beta1,
           float beta2, float eps, float weight_decay, int64_t step);

// out[t] = sum_squares(x[t], n[t]), tensor after tensor.
void sum_squares_multi(int64_t count, const float* const* x, const int64_t* n, double* out);
void adamw_multi(int64_t count, float* const* params, const float* const* grads, float* const* m,
                 float* const* v, const int64_t* numel, const float* weight_decay, float lr,
                 float beta1, float beta2, float eps, int64_t step);
void quantize(float* x, int64_t n, int32_t dtype, float scale, float* amax, int64_t* clipped);
// Narrow GEMM operands (loom/ops.h, ABI 2.7): bf16 storage, and GEMMs on the CPU's bf16
// instructions where gemm_operand_dtypes() has LOOM_BF16's bit (gemm_bf16.cpp).
uint32_t gemm_operand_dtypes();
// The instructions those GEMMs run on ("AMX"), nullptr where there are none.
const char* bf16_instructions();
void quantize_into(void* dst, int32_t dtype, const float* src, int64_t n, float scale, float* amax,
                   int64_t* clipped);
// A [rows x cols] bf16 operand (row stride ld) widened into `into`, row stride kept.
const float* widen_strided(std::vector<float>& into, const uint16_t* X, int64_t rows, int64_t ld,
                           int64_t cols);
// gemm on bf16 operands widened to fp32 as it goes: gemm's bits on the widened values.
void gemm_widening(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                   const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb, float beta,
                   float* C, int64_t ldc);
void gemm_typed(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                const void* A, int32_t a_dtype, int64_t lda, const void* B, int32_t b_dtype,
                int64_t ldb, float beta, float* C, int64_t ldc);

// The wire codecs (loom/ops.h says what each writes).
void to_bf16(uint16_t* dst, const float* src, int64_t n);
void from_bf16(float* dst, const uint16_t* src, int64_t n);
void encode_blocks(uint8_t* dst, const float* src, int64_t count, int64_t width, int64_t blocks);
void decode_blocks(float* dst, const uint8_t* src, int64_t count, int64_t width, int64_t blocks,
                   int32_t flags);

// Cross-entropy over a slice of the classes (loom/ops.h), for a vocab-parallel loss.
void row_max(float* mx, const float* z, int64_t N, int64_t ld, int64_t cols);
void xent_stats(float* stats, const float* z, const int32_t* targets, const float* mx, int64_t N,
                int64_t ld, int64_t cols, int64_t first);
void xent_grad(float* z, float* losses, const int32_t* targets, const float* mx, const float* stats,
               int64_t N, int64_t ld, int64_t cols, int64_t first, float dloss);

// A mixture-of-experts layer's routing and row moves (loom/ops.h).
void router_topk(float* probs, float* lse, float* weights, int32_t* experts, double* seq,
                 const float* logits, int64_t N, int64_t E, int64_t K, int64_t T);
void router_topk_bwd(float* dlogits, const float* probs, const float* lse, const float* weights,
                     const float* dw, const int32_t* experts, const double* balance, double z_scale,
                     int64_t N, int64_t E, int64_t K, int64_t T);
void gather_rows(float* dst, const float* src, const int32_t* index, int64_t rows, int64_t C);
void combine_rows(float* y, const float* rows, const float* w, const int32_t* slot, int64_t N,
                  int64_t K, int64_t C);
void combine_rows_bwd(float* drows, float* dw, const float* dy, const float* rows, const float* w,
                      const int32_t* slot, int64_t N, int64_t K, int64_t C);

// Threads for OpenMP kernels and OpenBLAS; 0 = all cores. Returns the count in use.
int set_threads(int n);

// The library behind gemm and its version ("oneDNN 2.6.3", "OpenBLAS 0.3.21"), for `loom
// version` and the sgemm probe's cache key.
const char* gemm_library();

// The op table of these kernels, on the host's memory (ops::cpu() hands it out).
const loom_ops_v2* op_table();

}  // namespace loom::cpu
