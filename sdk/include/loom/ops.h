/*
 * Loom plugin ABI 3: the op table, every kernel the model and the strategies run on one device.
 * The runtime fills it; a plugin reads it (its slot's setup context, or the loom.device service).
 * Self-contained C11; <loom/plugin.h> includes it.
 *
 * What changed from ABI 2's table (docs/plugins.md, "Porting a source from ABI 2"):
 *  - tensors whose dtype the caller may choose are typed (loom_ref, loom_cref: data and its
 *    loom_dtype), and `dtypes` says which dtypes each operation accepts on this device;
 *  - one entry per operation: ABI 2's twins (kept from ABI 1) are gone (layernorm_fwd takes eps,
 * attention takes the grouped-query layout, gemm takes typed operands, adamw and sum_squares take
 * lists, and convert replaces quantize_into, to_bf16 and from_bf16);
 *  - the device contract (copies, streams, events) comes first, as every entry may rely on it.
 * It grows within a major: new kernels go at the end, so read v.size (LOOM_HAS_FIELD) before a
 * kernel added after 3.0.
 */
#ifndef LOOM_OPS_H
#define LOOM_OPS_H

#include <loom/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A tensor argument of the caller's dtype: its first element and its loom_dtype. loom_cref is
 * the read-only form. Both travel by value. */
typedef struct loom_ref {
  void* data;
  int32_t dtype;    /* loom_dtype */
  int32_t reserved; /* 0 */
} loom_ref;

typedef struct loom_cref {
  const void* data;
  int32_t dtype;    /* loom_dtype */
  int32_t reserved; /* 0 */
} loom_cref;

/* The operations, as indices of loom_ops.dtypes. */
typedef enum loom_op_id {
  LOOM_OP_GEMM = 0,        /* gemm's A and B */
  LOOM_OP_GEMM_OUT = 1,    /* gemm's C */
  LOOM_OP_EMBEDDING = 2,   /* out, dout */
  LOOM_OP_NORM = 3,        /* layernorm and rmsnorm: out, inp, dout, dinp */
  LOOM_OP_BIAS = 4,        /* out, dout */
  LOOM_OP_ACTIVATION = 5,  /* gelu, gelu_erf, swiglu: every tensor */
  LOOM_OP_ATTENTION = 6,   /* attention, attention_block, attention_merge: q, k, v, out and their
                              gradients (lse stays fp32) */
  LOOM_OP_ROPE = 7,        /* x, dx */
  LOOM_OP_ELEMENTWISE = 8, /* add, accumulate, scale, sum_squares */
  LOOM_OP_XENT = 9,        /* softmax_xent's logits; row_max, xent_stats, xent_grad's z */
  LOOM_OP_CONVERT = 10,    /* convert: src and dst */
  LOOM_OP_ROWS = 11,       /* gather_rows, combine_rows, combine_rows_bwd: the rows and y */
  LOOM_OP_COUNT = 12
} loom_op_id;

/* Row-major tensors, N rows of C channels, B sequences of T positions. fp32 arguments (float*)
 * are fp32 on every device: parameters, their gradients, optimizer state, statistics (mean,
 * rstd, lse). A typed argument is any dtype whose bit (1u << dtype) is set in dtypes[its op]; an
 * entry handed another dtype stops the process with a message naming the entry and the dtype,
 * as an illegal launch would. Every device accepts LOOM_F32 everywhere; the CPU also takes bf16
 * for the norm, bias, element-wise, activation and attention entries (each computes on the
 * widened values as its fp32 form does and rounds what it writes once). Narrow arguments are read
 * as their fp32 values and written rounded to nearest-even. "_bwd" kernels ACCUMULATE into
 * parameter gradients (dw, db, dwte) and WRITE input gradients (dinp). */
typedef struct loom_ops {
  loom_version v;
  loom_device device;
  uint32_t dtypes[LOOM_OP_COUNT]; /* per loom_op_id, bit (1u << dtype) for each accepted dtype */
  /* Bits of the GEMM operand dtypes this device multiplies on its own narrow instructions (the
   * CPU: AMX, through oneDNN); an accepted dtype without its bit is widened to fp32 as the GEMM
   * goes, at fp32's speed. 0 where there are none. */
  uint32_t gemm_native_dtypes;

  /* ---- the device contract ----
   * A discrete device (cuda, strict) runs the kernels below asynchronously, in issue order, on
   * the calling thread's stream, over memory the host cannot dereference. The host reaches that
   * memory only through `copy`, and reads what a copy wrote only after waiting for it. On the
   * CPU every entry is immediate: copy is memcpy, the streams are the calling thread. Pointers
   * that may be host memory on every device (the host stages them and waits): tokens, targets,
   * losses, qpos/kpos, the rope tables, the lists of adamw and sum_squares, the amax and clipped
   * of convert and quantize. */
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

  /* ---- GEMM ----
   * C[M,N] = alpha * op(A) @ op(B) + beta * C, op(X) = X or X^T; lda/ldb/ldc are row strides
   * in elements. Products are accumulated in fp32 whatever the operands' dtypes, so narrow
   * operands give gemm on their widened values up to the order of the additions. */
  void (*gemm)(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha, loom_cref A,
               int64_t lda, loom_cref B, int64_t ldb, float beta, loom_ref C, int64_t ldc);

  /* ---- the model's layers ---- */
  /* out[b,t,:] = wte[tok[b,t],:] + wpe[t,:] (wpe may be NULL); backward accumulates dwte, dwpe. */
  void (*embedding_fwd)(loom_ref out, const int32_t* tokens, const float* wte, const float* wpe,
                        int64_t B, int64_t T, int64_t C);
  void (*embedding_bwd)(float* dwte, float* dwpe, loom_cref dout, const int32_t* tokens, int64_t B,
                        int64_t T, int64_t C);
  /* LayerNorm over C with epsilon eps (b may be NULL: no bias, and backward takes db = NULL);
   * saves mean and rstd per row for backward. */
  void (*layernorm_fwd)(loom_ref out, float* mean, float* rstd, loom_cref inp, const float* w,
                        const float* b, int64_t N, int64_t C, float eps);
  void (*layernorm_bwd)(loom_ref dinp, float* dw, float* db, loom_cref dout, loom_cref inp,
                        const float* w, const float* mean, const float* rstd, int64_t N, int64_t C);
  /* RMSNorm over C with epsilon eps; saves rstd per row. */
  void (*rmsnorm_fwd)(loom_ref out, float* rstd, loom_cref inp, const float* w, int64_t N,
                      int64_t C, float eps);
  void (*rmsnorm_bwd)(loom_ref dinp, float* dw, loom_cref dout, loom_cref inp, const float* w,
                      const float* rstd, int64_t N, int64_t C);
  /* out[:, j] += bias[j] over N rows; dbias[j] += sum over rows of dout[:, j]. */
  void (*bias_add)(loom_ref out, const float* bias, int64_t N, int64_t C);
  void (*bias_bwd)(float* dbias, loom_cref dout, int64_t N, int64_t C);
  /* GELU, tanh form, and exact form out = 0.5 x (1 + erf(x / sqrt 2)). */
  void (*gelu_fwd)(loom_ref out, loom_cref inp, int64_t n);
  void (*gelu_bwd)(loom_ref dinp, loom_cref inp, loom_cref dout, int64_t n);
  void (*gelu_erf_fwd)(loom_ref out, loom_cref inp, int64_t n);
  void (*gelu_erf_bwd)(loom_ref dinp, loom_cref inp, loom_cref dout, int64_t n);
  /* SwiGLU: inp rows are [gate (F) | up (F)], out[:, j] = silu(gate_j) * up_j. */
  void (*swiglu_fwd)(loom_ref out, loom_cref inp, int64_t N, int64_t F);
  void (*swiglu_bwd)(loom_ref dinp, loom_cref inp, loom_cref dout, int64_t N, int64_t F);
  /* Causal grouped-query attention: H query heads share Hkv key/value heads (H % Hkv == 0; query
   * head h reads key/value head h / (H / Hkv)). Row b*T+t of q holds head h at row*ldq + h*D;
   * k and v rows are ldkv apart, head g at row*ldkv + g*D. out rows are H*D; lse[b,h,t] =
   * log sum_j exp(s_tj) (the online-softmax statistics) lets backward recompute the
   * probabilities tile by tile, so no T x T matrix is ever stored. Backward writes dq, dk, dv in
   * the layouts of q, k, v. GPT-2's fused [q | k | v] rows are ldq = ldkv = 3 H D with k and v
   * at q + H D and q + 2 H D. */
  void (*attention_fwd)(loom_ref out, float* lse, loom_cref q, loom_cref k, loom_cref v,
                        int64_t ldq, int64_t ldkv, int64_t B, int64_t T, int64_t H, int64_t Hkv,
                        int64_t D);
  void (*attention_bwd)(loom_ref dq, loom_ref dk, loom_ref dv, loom_cref dout, loom_cref q,
                        loom_cref k, loom_cref v, loom_cref out, const float* lse, int64_t ldq,
                        int64_t ldkv, int64_t B, int64_t T, int64_t H, int64_t Hkv, int64_t D);
  /* Attention of Tq queries over a block of Tk keys anywhere in the sequence (context
   * parallelism): query i at position qpos[i] sees the keys with kpos[j] <= qpos[i]; NULL
   * positions mean 0, 1, 2, ... Layouts are attention_fwd's with Tq rows per sequence for q, out
   * and lse [B, H, Tq], and Tk for k, v. A query that sees no key gets out = 0, lse = -inf.
   * Backward is one key block's share of the gradients given the final out and lse. */
  void (*attention_block_fwd)(loom_ref out, float* lse, loom_cref q, loom_cref k, loom_cref v,
                              int64_t ldq, int64_t ldkv, int64_t B, int64_t Tq, int64_t Tk,
                              int64_t H, int64_t Hkv, int64_t D, const int64_t* qpos,
                              const int64_t* kpos);
  void (*attention_block_bwd)(loom_ref dq, loom_ref dk, loom_ref dv, loom_cref dout, loom_cref q,
                              loom_cref k, loom_cref v, loom_cref out, const float* lse,
                              int64_t ldq, int64_t ldkv, int64_t B, int64_t Tq, int64_t Tk,
                              int64_t H, int64_t Hkv, int64_t D, const int64_t* qpos,
                              const int64_t* kpos);
  /* Folds part (rows H*D, part_lse [B, H, T]) over another key block into out and lse:
   * lse' = log(exp(lse) + exp(part_lse)), out' = out exp(lse - lse') + part exp(part_lse - lse').
   */
  void (*attention_merge)(loom_ref out, float* lse, loom_cref part, const float* part_lse,
                          int64_t B, int64_t T, int64_t H, int64_t D);
  /* Rotary position embedding, half-split ("rotate_half") layout, in place on `heads` heads of D
   * (even) channels per row (row b*T+t at x + row*ld, head h at + h*D), at position pos0 + t:
   *   x'[i]       = x[i] cos_pi - x[i+D/2] sin_pi
   *   x'[i + D/2] = x[i+D/2] cos_pi + x[i] sin_pi       for i < D/2,
   * cos_pi = cos[p*D/2 + i], sin_pi = sin[p*D/2 + i]. rope_bwd applies the transpose. */
  void (*rope_fwd)(loom_ref x, int64_t ld, int64_t B, int64_t T, int64_t heads, int64_t D,
                   const float* cos, const float* sin, int64_t pos0);
  void (*rope_bwd)(loom_ref dx, int64_t ld, int64_t B, int64_t T, int64_t heads, int64_t D,
                   const float* cos, const float* sin, int64_t pos0);

  /* ---- element-wise ----
   * y[i] = a[i] + b[i]; y[i] += x[i]; x[i] *= s. */
  void (*add)(loom_ref y, loom_cref a, loom_cref b, int64_t n);
  void (*accumulate)(loom_ref y, loom_cref x, int64_t n);
  void (*scale)(loom_ref x, float s, int64_t n);
  /* out[t] = sum of x[t][i]^2 over i < n[t], accumulated in double, for `count` tensors; x, n
   * and out are host arrays; one host wait for all of them. */
  void (*sum_squares)(int64_t count, const loom_cref* x, const int64_t* n, double* out);
  /* Between fp32 and a narrower dtype of dtypes[LOOM_OP_CONVERT] (bf16 on every device so far):
   * exactly one side is fp32.
   * Narrowing: dst[i] = cast(src[i] * scale), rounded to nearest-even (bf16, fp16: a finite
   * value whose product overflows becomes infinity; a NaN stays a NaN); *amax = max |src[i]|
   * (NaN when any is NaN) and *clipped = how many finite values overflowed, each written when
   * not NULL. A device without a scaled cast (CUDA so far) takes scale 1 and NULLs there.
   * Widening: dst[i] = src[i] * scale (the widening is exact, so only the product rounds);
   * amax and clipped must be NULL. */
  void (*convert)(loom_ref dst, loom_cref src, int64_t n, float scale, float* amax,
                  int64_t* clipped);
  /* A GEMM operand cast through a narrower format in place in fp32 storage (the emulation every
   * device has): x[i] = cast(x[i] * scale) * (1 / scale), dtype LOOM_BF16, LOOM_F16,
   * LOOM_FP8_E4M3 or LOOM_FP8_E5M2, amax and clipped as convert's (both required). */
  void (*quantize)(float* x, int64_t n, int32_t dtype, float scale, float* amax, int64_t* clipped);

  /* ---- the loss ----
   * Fused softmax + cross-entropy over rows of V logits (only the first V_real are real
   * classes). losses[i] = lse_i - logit[i, target_i]; with dloss != 0 the logits become
   * dloss * (softmax - onehot) in place. Targets < 0 are ignored (loss 0, grad 0). */
  void (*softmax_xent)(loom_ref logits, float* losses, const int32_t* targets, int64_t N, int64_t V,
                       int64_t V_real, float dloss);
  /* The same over a slice of the classes (a tensor plugin's vocab-parallel loss), in three
   * kernels with the plugin's all-reduces between them. z is [N, ld]; its first `cols` columns
   * are real classes; the slice starts at class `first`. row_max: mx[i] = max_{j < cols} z[i, j]
   * (-inf for cols = 0). xent_stats: stats[i] = sum_{j < cols} exp(z[i, j] - mx[i]),
   * stats[N + i] = z[i, targets[i] - first] when that column is in [0, ld), else 0. xent_grad,
   * with the all-reduced mx and stats: losses[i] = log(stats[i]) + mx[i] - stats[N + i] (0 for
   * an ignored row); with dloss != 0, z becomes dloss exp(z - mx) / stats[i] on real columns, 0
   * past them and on ignored rows, and dloss less at the target. */
  void (*row_max)(float* mx, loom_cref z, int64_t N, int64_t ld, int64_t cols);
  void (*xent_stats)(float* stats, loom_cref z, const int32_t* targets, const float* mx, int64_t N,
                     int64_t ld, int64_t cols, int64_t first);
  void (*xent_grad)(loom_ref z, float* losses, const int32_t* targets, const float* mx,
                    const float* stats, int64_t N, int64_t ld, int64_t cols, int64_t first,
                    float dloss);

  /* ---- the optimizer (fp32 master weights and state) ----
   * AdamW with decoupled weight decay and bias correction (`step` counts from 1) over `count`
   * tensors in one launch: tensor t is params[t], grads[t], m[t] and v[t], numel[t] elements,
   * weight decay weight_decay[t]. The arrays of pointers and sizes are host memory. */
  void (*adamw)(int64_t count, float* const* params, const float* const* grads, float* const* m,
                float* const* v, const int64_t* numel, const float* weight_decay, float lr,
                float beta1, float beta2, float eps, int64_t step);

  /* ---- communication buffers ----
   * The fp8 wire blocks of <loom/formats.hpp> (a 4-byte scale, then `width` E4M3 codes).
   * encode_blocks: block j of `blocks` (at dst + j (4 + width)) holds src[j width, j width +
   * c_j), c_j = clamp(count - j width, 0, width). decode_blocks, per LOOM_BLOCKS_* flags: without
   * LOOM_BLOCKS_SUM block j goes to dst + j width; with it every block's first `count` values
   * (count <= width) fold into dst[0, count) in block order; with LOOM_BLOCKS_ADD the first block
   * adds to what dst holds. */
  void (*encode_blocks)(uint8_t* dst, const float* src, int64_t count, int64_t width,
                        int64_t blocks);
  void (*decode_blocks)(float* dst, const uint8_t* src, int64_t count, int64_t width,
                        int64_t blocks, int32_t flags);

  /* ---- mixture of experts ----
   * Rows are tokens t < N in sequences of T rows (b = t / T), E experts, K choices per token.
   * router_topk, per row of logits [N, E], in double: probs = softmax, lse[t] = log sum exp;
   * experts[t, k] is the k-th largest probability (ties to the lower expert); weights[t, k] =
   * p_k / sum_j p_j for K > 1, p_0 for K = 1. seq[b, e] sums probs[t, e] over sequence b (e < E)
   * and seq[b, E] sums lse[t]^2, in double in row order. experts and seq may be host memory. */
  void (*router_topk)(float* probs, float* lse, float* weights, int32_t* experts, double* seq,
                      const float* logits, int64_t N, int64_t E, int64_t K, int64_t T);
  /* Its backward, in double per row: dp[e] = balance[b, e], plus at e = experts[t, k]
   * (dw[t, k] - sum_j dw[t, j] weights[t, j]) / sum_j probs[t, experts[t, j]] for K > 1, or
   * dw[t, 0] for K = 1; then dlogits[t, e] = p_e (dp[e] - sum_e' p_e' dp[e']) + z_scale lse[t] p_e.
   * experts and balance ([N / T, E]) may be host memory. */
  void (*router_topk_bwd)(float* dlogits, const float* probs, const float* lse,
                          const float* weights, const float* dw, const int32_t* experts,
                          const double* balance, double z_scale, int64_t N, int64_t E, int64_t K,
                          int64_t T);
  /* dst[r, :] = src[index[r], :] for r < rows, rows of C; index may be host memory. */
  void (*gather_rows)(loom_ref dst, loom_cref src, const int32_t* index, int64_t rows, int64_t C);
  /* y[t, :] = sum over k < K in order, where slot[t K + k] >= 0, of w[t K + k] rows[slot, :]
   * (w NULL: weight 1); a token with no slot gets 0. Backward, for i = t K + k with slot[i] >= 0:
   * drows[slot[i], :] = w[i] dy[t, :] and dw[i] = sum_j dy[t, j] rows[slot[i], j] in double;
   * dw[i] = 0 where slot[i] < 0. slot may be host memory. */
  void (*combine_rows)(loom_ref y, loom_cref rows, const float* w, const int32_t* slot, int64_t N,
                       int64_t K, int64_t C);
  void (*combine_rows_bwd)(loom_ref drows, float* dw, loom_cref dy, loom_cref rows, const float* w,
                           const int32_t* slot, int64_t N, int64_t K, int64_t C);
} loom_ops;

#define LOOM_BLOCKS_SUM 1
#define LOOM_BLOCKS_ADD 2

/* The streams of a device: kernels on one, communication on the other, ordered by events. */
#define LOOM_STREAM_COMPUTE 0
#define LOOM_STREAM_COMM 1

#ifdef __cplusplus
}
#endif

#endif /* LOOM_OPS_H */
