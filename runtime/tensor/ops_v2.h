/*
 * The device's kernels in plugin ABI 2's layout (frozen at 2.7): the table the runtime itself calls
 * through, and the one ABI 1 and ABI 2 plugins receive (in their setup contexts and as the
 * loom.device service), since both majors' op tables are prefixes of this one. ABI 3 plugins get
 * <loom/ops.h>'s typed table instead, built over this one by runtime/ops/typed_ops.cpp.
 * It lives beside Tensor because a tensor carries its device's table (for copies).
 * Frozen: a new kernel goes into the ABI 3 table and, when the runtime calls it, here at the end.
 */
#ifndef LOOM_RUNTIME_OPS_V2_H
#define LOOM_RUNTIME_OPS_V2_H

#include <loom/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* All tensors are contiguous row-major fp32 unless said otherwise; N rows of C channels, B
 * sequences of T positions. "_bwd" kernels ACCUMULATE into parameter gradients (dw, db, dwte)
 * and WRITE input gradients (dinp) unless named "_acc". A device fills the whole table. */
typedef struct loom_ops_v2 {
  loom_version v;
  loom_device device;

  /* C[M,N] = alpha * op(A) @ op(B) + beta * C, op(X) = X or X^T; lda/ldb/ldc are row strides. */
  void (*gemm)(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
               int64_t ldc);

  /* out[b,t,:] = wte[tok[b,t],:] + wpe[t,:] (wpe may be NULL). */
  void (*embedding_fwd)(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                        int64_t B, int64_t T, int64_t C);
  void (*embedding_bwd)(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                        int64_t B, int64_t T, int64_t C);

  /* LayerNorm over C; saves mean and rstd per row for backward. */
  void (*layernorm_fwd)(float* out, float* mean, float* rstd, const float* inp, const float* w,
                        const float* b, int64_t N, int64_t C);
  void (*layernorm_bwd)(float* dinp, float* dw, float* db, const float* dout, const float* inp,
                        const float* w, const float* mean, const float* rstd, int64_t N, int64_t C);
  /* RMSNorm over C; saves rstd per row. */
  void (*rmsnorm_fwd)(float* out, float* rstd, const float* inp, const float* w, int64_t N,
                      int64_t C);
  void (*rmsnorm_bwd)(float* dinp, float* dw, const float* dout, const float* inp, const float* w,
                      const float* rstd, int64_t N, int64_t C);

  /* out[:, j] += bias[j] over N rows; dbias[j] += sum over rows of dout[:, j]. */
  void (*bias_add)(float* out, const float* bias, int64_t N, int64_t C);
  void (*bias_bwd)(float* dbias, const float* dout, int64_t N, int64_t C);

  /* GELU, tanh form. */
  void (*gelu_fwd)(float* out, const float* inp, int64_t n);
  void (*gelu_bwd)(float* dinp, const float* inp, const float* dout, int64_t n);
  /* SwiGLU: inp rows are [gate (F) | up (F)], out[:, j] = silu(gate_j) * up_j. */
  void (*swiglu_fwd)(float* out, const float* inp, int64_t N, int64_t F);
  void (*swiglu_bwd)(float* dinp, const float* inp, const float* dout, int64_t N, int64_t F);

  /* Causal multi-head attention. qkv rows are [q (H*D) | k (H*D) | v (H*D)], out rows H*D.
   * Forward saves lse[b,h,t] = log sum_j exp(s_tj) (the online-softmax statistics) so backward
   * recomputes the probabilities tile by tile; no T x T matrix is ever stored. */
  void (*attention_fwd)(float* out, float* lse, const float* qkv, int64_t B, int64_t T, int64_t H,
                        int64_t D);
  void (*attention_bwd)(float* dqkv, const float* dout, const float* qkv, const float* out,
                        const float* lse, int64_t B, int64_t T, int64_t H, int64_t D);

  /* y[i] = a[i] + b[i]; y[i] += x[i]; x[i] *= s. */
  void (*add)(float* y, const float* a, const float* b, int64_t n);
  void (*accumulate)(float* y, const float* x, int64_t n);
  void (*scale)(float* x, float s, int64_t n);
  /* sum of x[i]^2, accumulated in double. */
  double (*sum_squares)(const float* x, int64_t n);

  /* Fused softmax + cross-entropy over rows of V logits (only the first V_real are real classes;
   * the rest are padding and get probability 0). losses[i] = lse_i - logit[i, target_i].
   * With dloss != 0 the logits are overwritten in place with dloss * (softmax - onehot), so the
   * probability tensor never exists beside them. Targets < 0 are ignored (loss 0, grad 0). */
  void (*softmax_xent)(float* logits, float* losses, const int32_t* targets, int64_t N, int64_t V,
                       int64_t V_real, float dloss);

  /* AdamW with decoupled weight decay and bias correction; `step` counts from 1. */
  void (*adamw)(float* param, const float* grad, float* m, float* v, int64_t n, float lr,
                float beta1, float beta2, float eps, float weight_decay, int64_t step);

  /* ---- added in ABI 1.1 (the layout is frozen as 1.8 left it) ---- */
  /* A GEMM operand cast through a narrower format, in place in fp32 storage:
   *   x[i] = cast(x[i] * scale) * (1 / scale)
   * with round-to-nearest-even (a finite x[i] whose product overflows fp32 counts as overflow).
   * dtype is LOOM_BF16, LOOM_F16, LOOM_FP8_E4M3 or LOOM_FP8_E5M2. bf16 and fp16 overflow to
   * infinity (IEEE); both fp8 formats saturate finite overflow to their largest value (448, 57344).
   * Writes *amax = max |x[i]| before the cast (NaN when any x[i] is NaN) and *clipped = how many
   * finite elements overflowed or saturated. A device with native narrow GEMMs casts into real
   * narrow buffers instead; this is the emulation every device has. */
  void (*quantize)(float* x, int64_t n, int32_t dtype, float scale, float* amax, int64_t* clipped);

  /* ---- added in ABI 1.4 ---- */
  /* The norms above with the epsilon as an argument (they use 1e-5). LayerNorm's b may be NULL
   * (no bias); then layernorm_bwd takes db = NULL. */
  void (*layernorm_fwd_eps)(float* out, float* mean, float* rstd, const float* inp, const float* w,
                            const float* b, int64_t N, int64_t C, float eps);
  void (*rmsnorm_fwd_eps)(float* out, float* rstd, const float* inp, const float* w, int64_t N,
                          int64_t C, float eps);
  /* Causal grouped-query attention: H query heads share Hkv key/value heads (H % Hkv == 0; query
   * head h reads key/value head h / (H / Hkv)), so K and V are never repeated in memory. Row
   * b*T+t of q holds head h at q + row*ldq + h*D; k and v rows are ldkv apart, head g at
   * k + row*ldkv + g*D (and v likewise). out rows are H*D, lse is [B, H, T]. Backward writes
   * dq, dk, dv in the layouts of q, k, v. Hkv = H with q, k, v inside one [q | k | v] row is
   * attention_fwd above. */
  void (*attention_gqa_fwd)(float* out, float* lse, const float* q, const float* k, const float* v,
                            int64_t ldq, int64_t ldkv, int64_t B, int64_t T, int64_t H, int64_t Hkv,
                            int64_t D);
  void (*attention_gqa_bwd)(float* dq, float* dk, float* dv, const float* dout, const float* q,
                            const float* k, const float* v, const float* out, const float* lse,
                            int64_t ldq, int64_t ldkv, int64_t B, int64_t T, int64_t H, int64_t Hkv,
                            int64_t D);
  /* Rotary position embedding, half-split ("rotate_half") layout, in place on `heads` heads of D
   * (even) channels per row (row b*T+t at x + row*ld, head h at + h*D), at position pos0 + t:
   *   x'[i]       = x[i] cos_pi - x[i+D/2] sin_pi
   *   x'[i + D/2] = x[i+D/2] cos_pi + x[i] sin_pi       for i < D/2,
   * cos_pi = cos[p*D/2 + i], sin_pi = sin[p*D/2 + i] (tables of the caller's frequencies).
   * rope_bwd applies the inverse rotation (the transpose), turning the gradient with respect to
   * the rotated vector into the gradient with respect to the input. */
  void (*rope_fwd)(float* x, int64_t ld, int64_t B, int64_t T, int64_t heads, int64_t D,
                   const float* cos, const float* sin, int64_t pos0);
  void (*rope_bwd)(float* dx, int64_t ld, int64_t B, int64_t T, int64_t heads, int64_t D,
                   const float* cos, const float* sin, int64_t pos0);

  /* ---- added in ABI 1.5 ---- */
  /* Attention of Tq queries over a block of Tk keys that may lie anywhere in the sequence, for
   * context parallelism. Query i sits at position qpos[i], key j at kpos[j], both ascending; query
   * i sees the keys with kpos[j] <= qpos[i] (causal). NULL positions mean 0, 1, 2, ... Layouts are
   * attention_gqa_fwd's with Tq rows per sequence for q, out and lse [B, H, Tq], and Tk for k, v.
   * A query that sees no key gets out = 0 and lse = -inf. */
  void (*attention_block_fwd)(float* out, float* lse, const float* q, const float* k,
                              const float* v, int64_t ldq, int64_t ldkv, int64_t B, int64_t Tq,
                              int64_t Tk, int64_t H, int64_t Hkv, int64_t D, const int64_t* qpos,
                              const int64_t* kpos);
  /* One key block's share of the gradients, given the attention's final out and lse (over every
   * block): writes dq (this block's share, ldq layout), dk and dv (ldkv layout). */
  void (*attention_block_bwd)(float* dq, float* dk, float* dv, const float* dout, const float* q,
                              const float* k, const float* v, const float* out, const float* lse,
                              int64_t ldq, int64_t ldkv, int64_t B, int64_t Tq, int64_t Tk,
                              int64_t H, int64_t Hkv, int64_t D, const int64_t* qpos,
                              const int64_t* kpos);
  /* Folds part (out rows H*D, part_lse [B, H, T]) over another key block into out and lse:
   * lse' = log(exp(lse) + exp(part_lse)), out' = out exp(lse - lse') + part exp(part_lse - lse').
   */
  void (*attention_merge)(float* out, float* lse, const float* part, const float* part_lse,
                          int64_t B, int64_t T, int64_t H, int64_t D);

  /* ---- added in ABI 1.8 ---- */
  /* GELU, exact form: out = 0.5 x (1 + erf(x / sqrt 2)) (GPT-2's "gelu", BERT). */
  void (*gelu_erf_fwd)(float* out, const float* inp, int64_t n);
  void (*gelu_erf_bwd)(float* dinp, const float* inp, const float* dout, int64_t n);

  /* ---- added in ABI 2.2: the device contract (check LOOM_HAS_FIELD before use) ----
   * A discrete device (cuda, strict) runs the kernels above asynchronously, in issue order, on
   * the calling thread's stream, over memory the host cannot dereference. The host reaches that
   * memory only through `copy`, and reads what a copy wrote only after waiting for it. On the
   * CPU every entry here is immediate: copy is memcpy, the streams are the calling thread.
   * Pointers that may be host memory on every device (the host stages them and waits): tokens,
   * targets, losses, qpos/kpos, the rope tables, quantize's amax and clipped; sum_squares waits
   * to return its value. */
  int32_t host_reachable; /* 1: host code may dereference this device's pointers (the CPU) */
  /* dst[0, bytes) = src[0, bytes), on the calling thread's stream; either side host or device. */
  void (*copy)(void* dst, const void* src, int64_t bytes);
  /* dst[0, bytes) = 0, on the calling thread's stream. */
  void (*zero)(void* dst, int64_t bytes);
  /* The stream this thread's kernels and copies go to from now on (LOOM_STREAM_*). */
  void (*set_stream)(int32_t stream);
  /* An event after all work issued so far on this thread's stream. wait_event: later work on
   * this thread's stream starts after it. sync_event: the host blocks until it has happened. */
  int64_t (*record_event)(void);
  void (*wait_event)(int64_t event);
  void (*sync_event)(int64_t event);
  /* The host blocks until every stream's work is done. */
  void (*synchronize)(void);
  /* Host memory a copy can stage through at full speed (page-locked on a GPU). */
  void* (*pinned_alloc)(int64_t bytes);
  void (*pinned_free)(void* p);

  /* ---- added in ABI 2.3 (check LOOM_HAS_FIELD before use) ----
   * adamw over `count` tensors at once (one launch on a GPU): tensor t is params[t], grads[t],
   * m[t] and v[t], numel[t] elements, with weight decay weight_decay[t]; the other arguments as
   * adamw's. The five arrays of pointers and sizes are host memory. */
  void (*adamw_multi)(int64_t count, float* const* params, const float* const* grads,
                      float* const* m, float* const* v, const int64_t* numel,
                      const float* weight_decay, float lr, float beta1, float beta2, float eps,
                      int64_t step);

  /* ---- added in ABI 2.4 (check LOOM_HAS_FIELD before use) ----
   * out[t] = sum_squares(x[t], n[t]) for `count` tensors, each accumulated in double as
   * sum_squares does; the arrays of pointers and sizes and `out` are host memory. One host wait
   * for all of them (a gradient norm over every parameter). */
  void (*sum_squares_multi)(int64_t count, const float* const* x, const int64_t* n, double* out);

  /* ---- added in ABI 2.5 (check LOOM_HAS_FIELD before use) ----
   * The wire codecs of plugins that send gradients or parameters narrower than fp32 (ddp's and
   * zero's reduce_dtype, zero3's gather_dtype), as kernels, so the buffers stay on the device.
   * bf16 is loom/bf16.hpp's rounding (nearest-even, a NaN stays a NaN); the fp8 blocks are
   * loom/formats.hpp's E4M3 wire blocks (a 4-byte scale, then `width` codes). */
  void (*to_bf16)(uint16_t* dst, const float* src, int64_t n);
  void (*from_bf16)(float* dst, const uint16_t* src, int64_t n);
  /* Block j of `blocks` (each block_bytes(width) = 4 + width bytes at dst + j (4 + width)) holds
   * src[j width, j width + c_j), c_j = clamp(count - j width, 0, width), as formats'
   * encode_block(src + j width, c_j, width, ...) writes it. */
  void (*encode_blocks)(uint8_t* dst, const float* src, int64_t count, int64_t width,
                        int64_t blocks);
  /* The inverse, per LOOM_BLOCKS_* flags: without LOOM_BLOCKS_SUM block j goes to
   * dst + j width (c_j values as above); with it every block's first `count` values (count <=
   * width) fold into dst[0, count) in block order: dst = b_0 + b_1 + ... With LOOM_BLOCKS_ADD
   * the first block adds to what dst holds instead of replacing it. */
  void (*decode_blocks)(float* dst, const uint8_t* src, int64_t count, int64_t width,
                        int64_t blocks, int32_t flags);

  /* Cross-entropy over a slice of the classes (a tensor plugin's vocab-parallel loss), in three
   * kernels with the plugin's all-reduces between them, so the logits never leave the device.
   * z is [N, ld]; its first `cols` columns are real classes; the slice starts at class `first`;
   * a row whose target is < 0 is ignored; targets may be host memory (staged).
   * row_max: mx[i] = max_{j < cols} z[i, j] (-inf for cols = 0). */
  void (*row_max)(float* mx, const float* z, int64_t N, int64_t ld, int64_t cols);
  /* stats[i] = sum_{j < cols} exp(z[i, j] - mx[i]) (in column order on the CPU and strict; a
   * GPU sums in another order, equal to rounding); stats[N + i] = z[i, t] for
   * t = targets[i] - first in [0, ld), else 0. */
  void (*xent_stats)(float* stats, const float* z, const int32_t* targets, const float* mx,
                     int64_t N, int64_t ld, int64_t cols, int64_t first);
  /* With the all-reduced mx and stats: losses[i] = log(stats[i]) + mx[i] - stats[N + i], 0 for
   * an ignored row (losses may be host memory: the host waits). With dloss != 0, z becomes its
   * gradient: dloss exp(z - mx) / stats[i] on real columns, 0 past them and on ignored rows,
   * and dloss less at the target. */
  void (*xent_grad)(float* z, float* losses, const int32_t* targets, const float* mx,
                    const float* stats, int64_t N, int64_t ld, int64_t cols, int64_t first,
                    float dloss);

  /* ---- added in ABI 2.6 (check LOOM_HAS_FIELD before use) ----
   * A mixture-of-experts layer's routing and row moves, as kernels: the router's probabilities
   * and the experts' rows stay on the device, and the host receives only what dispatch and the
   * statistics need (each token's experts and each sequence's sums). Rows are tokens t < N, in
   * sequences of T rows (N a multiple of T, b = t / T), E experts, K choices per token.
   * router_topk, per row of logits [N, E], in double: m = max_e z, s = sum_e exp(z - m),
   * probs[t, e] = exp(z - m) / s, lse[t] = m + log s; experts[t, k] is the k-th largest
   * probability (ties to the lower expert); weights[t, k] = p_k / sum_j p_j for K > 1, p_0 for
   * K = 1. seq[b, e] = sum of probs[t, e] over the rows of sequence b (e < E) and
   * seq[b, E] = sum of lse[t]^2 over them, each in double in row order. experts and seq may be
   * host memory (the host waits). */
  void (*router_topk)(float* probs, float* lse, float* weights, int32_t* experts, double* seq,
                      const float* logits, int64_t N, int64_t E, int64_t K, int64_t T);
  /* Its backward, in double per row: dp[e] = balance[b, e], plus at e = experts[t, k]
   * (dw[t, k] - sum_j dw[t, j] weights[t, j]) / sum_j probs[t, experts[t, j]] for K > 1, or
   * dw[t, 0] for K = 1; then dlogits[t, e] = p_e (dp[e] - sum_e' p_e' dp[e']) + z_scale lse[t] p_e.
   * experts and balance ([N / T, E]) may be host memory (staged). */
  void (*router_topk_bwd)(float* dlogits, const float* probs, const float* lse,
                          const float* weights, const float* dw, const int32_t* experts,
                          const double* balance, double z_scale, int64_t N, int64_t E, int64_t K,
                          int64_t T);
  /* dst[r, :] = src[index[r], :] for r < rows, rows of C floats; index may be host memory. */
  void (*gather_rows)(float* dst, const float* src, const int32_t* index, int64_t rows, int64_t C);
  /* y[t, :] = sum over k < K in order, where slot[t K + k] >= 0, of
   * w[t K + k] rows[slot[t K + k], :] (w null: weight 1); a token with no slot gets 0. slot may
   * be host memory. */
  void (*combine_rows)(float* y, const float* rows, const float* w, const int32_t* slot, int64_t N,
                       int64_t K, int64_t C);
  /* Its backward for i = t K + k with slot[i] >= 0: drows[slot[i], :] = w[i] dy[t, :] and
   * dw[i] = sum_j dy[t, j] rows[slot[i], j] in double; dw[i] = 0 where slot[i] < 0. Every row
   * of drows is some slot's (slots are distinct). slot may be host memory. */
  void (*combine_rows_bwd)(float* drows, float* dw, const float* dy, const float* rows,
                           const float* w, const int32_t* slot, int64_t N, int64_t K, int64_t C);

  /* ---- added in ABI 2.7 (check LOOM_HAS_FIELD before use; a device may leave them 0/NULL) ----
   * GEMM operands stored narrower than fp32, for the precision slot's sites: half the bytes and
   * the device's own narrow instructions (the CPU: AMX, through oneDNN).
   * gemm_operand_dtypes has bit (1 << dtype) set for each operand dtype gemm_typed runs on those
   * instructions here; 0 where there are none. The runtime stores bf16 operands wherever
   * gemm_typed is set (it widens what it has no instructions for), and keeps quantize's
   * emulation in fp32 storage where it is NULL. quantize_into: dst[i] = cast(src[i] * scale) in
   * dtype's storage (LOOM_BF16: the upper 16 bits of the rounded fp32), rounded, counted (*clipped)
   * and measured (*amax) exactly as quantize; so with scale 1 it holds, bit for bit, the values
   * quantize leaves in fp32. */
  uint32_t gemm_operand_dtypes;
  void (*quantize_into)(void* dst, int32_t dtype, const float* src, int64_t n, float scale,
                        float* amax, int64_t* clipped);
  /* gemm with A of a_dtype and B of b_dtype, each LOOM_F32 or LOOM_BF16 (whatever
   * gemm_operand_dtypes says: a dtype without its bit is widened to fp32 as the GEMM goes, at
   * fp32's speed), C fp32.
   * Products of bf16 values are exact in fp32 and are accumulated in fp32, so the result equals
   * gemm on the widened operands up to the order of the additions. */
  void (*gemm_typed)(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                     const void* A, int32_t a_dtype, int64_t lda, const void* B, int32_t b_dtype,
                     int64_t ldb, float beta, float* C, int64_t ldc);
} loom_ops_v2;

/* What a loom_ops_v2 table's v says: ABI 2.7, the layout ABI 1 and 2 plugins were built for. */
#define LOOM_OPS_V2_VERSION \
  { (uint16_t)2, (uint16_t)7, (uint32_t)sizeof(loom_ops_v2) }

#ifdef __cplusplus
}
#endif

#endif /* LOOM_RUNTIME_OPS_V2_H */
