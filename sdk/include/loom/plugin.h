/*
 * Loom plugin ABI, version 1.
 *
 * The whole boundary between the Loom runtime and a strategy plugin. Plain C11: no C++ types, no
 * exceptions, no ownership of runtime memory crosses it. Rules that keep it stable:
 *
 *  - Every struct starts with a loom_version {major, minor, size}. `major` must equal
 *    LOOM_ABI_MAJOR on both sides; a field is read only if `size` covers it (LOOM_HAS_FIELD).
 *  - Tables are append-only within a major: new fields go at the end and bump LOOM_ABI_MINOR.
 *  - A library exports one symbol, loom_plugin_entry_v1. A future major exports _v2 beside it.
 *  - Strings handed to the plugin are borrowed for the duration of the call unless said otherwise;
 *    strings the plugin hands back (names, help) must live as long as the library.
 */
#ifndef LOOM_PLUGIN_H
#define LOOM_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LOOM_ABI_MAJOR 1
#define LOOM_ABI_MINOR 8 /* 1.1: op-table quantize, precision format policy; 1.2: pipeline slot,
                           * sharded data; 1.3: expert slot, expert gradients in the data slot;
                           * 1.4: op-table norms with eps, grouped-query attention, RoPE;
                           * 1.5: context slot, block attention and merge in the op table;
                           * 1.6: declared capabilities (data, ckpt), data-plugin state in
                           * checkpoints, the checkpoint read path, option rules and a validate
                           * hook, the placement, trace and plugins services;
                           * 1.7: the cost entry of parallel plugins, for `loom plan`;
                           * 1.8: exact (erf) GELU in the op table */

#if defined(_WIN32)
#define LOOM_EXPORT __declspec(dllexport)
#else
#define LOOM_EXPORT __attribute__((visibility("default")))
#endif

/* ---- versions and status -------------------------------------------------------------------- */

typedef struct loom_version {
  uint16_t major;
  uint16_t minor;
  uint32_t size; /* sizeof the enclosing struct as the producer compiled it */
} loom_version;

#define LOOM_VERSION_OF(type) \
  { (uint16_t)LOOM_ABI_MAJOR, (uint16_t)LOOM_ABI_MINOR, (uint32_t)sizeof(type) }

/* True when a struct produced by the other side is large enough to contain `field`. */
#define LOOM_HAS_FIELD(ptr, type, field) \
  ((ptr)->v.size >= offsetof(type, field) + sizeof(((type*)0)->field))

typedef enum loom_status {
  LOOM_OK = 0,
  LOOM_UNAVAILABLE = 1, /* cannot run here (no device, not launched by MPI, ...) */
  LOOM_BAD_CONFIG = 2,  /* the user's configuration is wrong; message says which key */
  LOOM_SYSTEM = 3,      /* the OS or a library failed (I/O, socket, allocation) */
  LOOM_INTERNAL = 4,    /* a bug: an invariant of the plugin or runtime broke */
  LOOM_FATAL = 5        /* the job cannot continue (peer died, state corrupted) */
} loom_status;

/* Opaque error sink owned by the runtime; fill it through loom_host.set_error. */
typedef struct loom_error loom_error;

/* ---- tensors (modelled on DLPack's DLTensor, borrowed for the call) ------------------------- */

typedef enum loom_dtype {
  LOOM_F32 = 0,
  LOOM_F64 = 1,
  LOOM_BF16 = 2,
  LOOM_F16 = 3,
  LOOM_FP8_E4M3 = 4,
  LOOM_FP8_E5M2 = 5,
  LOOM_I32 = 6,
  LOOM_I64 = 7,
  LOOM_U8 = 8
} loom_dtype;

typedef enum loom_device_kind { LOOM_DEVICE_CPU = 0, LOOM_DEVICE_CUDA = 1 } loom_device_kind;

typedef struct loom_device {
  int32_t kind; /* loom_device_kind */
  int32_t index;
} loom_device;

#define LOOM_MAX_DIMS 8

typedef struct loom_tensor {
  void* data;
  loom_device device;
  int32_t dtype; /* loom_dtype */
  int32_t ndim;
  int64_t shape[LOOM_MAX_DIMS];
  int64_t strides[LOOM_MAX_DIMS]; /* in elements, not bytes */
} loom_tensor;

/* ---- options: each plugin declares the schema of its own [plugins.<name>] table ------------- */

typedef enum loom_option_type {
  LOOM_OPT_INT = 0,
  LOOM_OPT_FLOAT = 1,
  LOOM_OPT_BOOL = 2,
  LOOM_OPT_STRING = 3
} loom_option_type;

typedef struct loom_option_spec {
  const char* name;          /* NULL terminates the schema array */
  int32_t type;              /* loom_option_type */
  const char* default_value; /* written as TOML would write it: "16", "0.5", "true", "\"max\"" */
  const char* help;
} loom_option_spec;

/* The validated, defaults-filled option table of one plugin; read it through the host. */
typedef struct loom_options loom_options;

/* ABI 1.6: limits on a plugin's options, which the runtime checks (in `loom config check` too)
 * before create(). Found through get_proc(LOOM_PROC_OPTION_RULES), which returns a
 * `const loom_option_rule*` array ended by a NULL name; an option without a rule is unlimited. */
typedef struct loom_option_rule {
  const char* name;    /* an option of the schema */
  double min, max;     /* INT and FLOAT options: the inclusive range; min > max means none */
  const char* choices; /* STRING options: the allowed values, "|"-separated; NULL = any */
  int32_t required;    /* 1: the user must set it in [plugins.<name>]; the default is not used */
} loom_option_rule;
#define LOOM_PROC_OPTION_RULES "loom_option_rules_v1"

/* ABI 1.6: what the rules cannot say (two options that must agree). Found through
 * get_proc(LOOM_PROC_VALIDATE_OPTIONS); called with the checked, filled options before create()
 * and by `loom config check`, without an instance. LOOM_BAD_CONFIG with a message naming the keys. */
typedef loom_status (*loom_validate_options_fn)(const void* host /* const loom_host* */,
                                                const loom_options* opts, loom_error* err);
#define LOOM_PROC_VALIDATE_OPTIONS "loom_validate_options_v1"

/* ---- the op table: every kernel the model and the strategies run, on one device ------------ */

/* All tensors are contiguous row-major fp32 unless said otherwise; N rows of C channels, B
 * sequences of T positions. "_bwd" kernels ACCUMULATE into parameter gradients (dw, db, dwte)
 * and WRITE input gradients (dinp) unless named "_acc". A device fills the whole table. */
typedef struct loom_ops {
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
                        const float* w, const float* mean, const float* rstd, int64_t N,
                        int64_t C);
  /* RMSNorm over C; saves rstd per row. */
  void (*rmsnorm_fwd)(float* out, float* rstd, const float* inp, const float* w, int64_t N,
                      int64_t C);
  void (*rmsnorm_bwd)(float* dinp, float* dw, const float* dout, const float* inp,
                      const float* w, const float* rstd, int64_t N, int64_t C);

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
  void (*attention_fwd)(float* out, float* lse, const float* qkv, int64_t B, int64_t T,
                        int64_t H, int64_t D);
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

  /* ---- ABI 1.1 ---- */
  /* A GEMM operand cast through a narrower format, in place in fp32 storage:
   *   x[i] = cast(x[i] * scale) * (1 / scale)
   * with round-to-nearest-even (a finite x[i] whose product overflows fp32 counts as overflow). dtype is LOOM_BF16, LOOM_F16, LOOM_FP8_E4M3 or LOOM_FP8_E5M2.
   * bf16 and fp16 overflow to infinity (IEEE); both fp8 formats saturate finite overflow to their
   * largest value (448, 57344). Writes *amax = max |x[i]| before the cast (NaN when any x[i] is
   * NaN) and *clipped = how many finite elements overflowed or saturated. A device with native
   * narrow GEMMs casts into real narrow buffers instead; this is the emulation every device has. */
  void (*quantize)(float* x, int64_t n, int32_t dtype, float scale, float* amax, int64_t* clipped);

  /* ---- ABI 1.4 ---- */
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
                            int64_t ldq, int64_t ldkv, int64_t B, int64_t T, int64_t H,
                            int64_t Hkv, int64_t D);
  void (*attention_gqa_bwd)(float* dq, float* dk, float* dv, const float* dout, const float* q,
                            const float* k, const float* v, const float* out, const float* lse,
                            int64_t ldq, int64_t ldkv, int64_t B, int64_t T, int64_t H,
                            int64_t Hkv, int64_t D);
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

  /* ---- ABI 1.5 ---- */
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
   * lse' = log(exp(lse) + exp(part_lse)), out' = out exp(lse - lse') + part exp(part_lse - lse'). */
  void (*attention_merge)(float* out, float* lse, const float* part, const float* part_lse,
                          int64_t B, int64_t T, int64_t H, int64_t D);

  /* ---- ABI 1.8 ---- */
  /* GELU, exact form: out = 0.5 x (1 + erf(x / sqrt 2)) (GPT-2's "gelu", BERT). */
  void (*gelu_erf_fwd)(float* out, const float* inp, int64_t n);
  void (*gelu_erf_bwd)(float* dinp, const float* inp, const float* dout, int64_t n);
} loom_ops;

/* ---- the host table: everything the runtime offers a plugin (append-only) ------------------ */

typedef enum loom_log_level {
  LOOM_LOG_DEBUG = 0,
  LOOM_LOG_INFO = 1,
  LOOM_LOG_WARN = 2,
  LOOM_LOG_ERROR = 3
} loom_log_level;

/* Filled by later parts of the runtime; declared here so the host table's layout is fixed. */
typedef struct loom_mesh loom_mesh;         /* communicators of each mesh axis */
typedef struct loom_params loom_params;     /* the parameter store */
typedef struct loom_hooks loom_hooks;       /* layer hooks: pre/post forward/backward, grad_ready */
typedef struct loom_timers loom_timers;     /* timers and trace events */

typedef struct loom_host {
  loom_version v;
  const char* runtime_version; /* "0.1.0" */

  void (*log)(int32_t level, const char* plugin, const char* msg);
  /* Records a status and message; the host copies msg. Returns `s` so a plugin can write
   * `return host->set_error(err, LOOM_BAD_CONFIG, "...")`. */
  loom_status (*set_error)(loom_error* err, loom_status s, const char* msg);

  /* Typed reads of a plugin's own options. Every key in the plugin's schema is present (defaults
   * filled); a key outside the schema or of another type gives LOOM_BAD_CONFIG. */
  loom_status (*opt_i64)(const loom_options*, const char* key, int64_t* out);
  loom_status (*opt_f64)(const loom_options*, const char* key, double* out);
  loom_status (*opt_bool)(const loom_options*, const char* key, int32_t* out);
  loom_status (*opt_str)(const loom_options*, const char* key, const char** out); /* borrowed */

  /* Memory on a device; aligned to at least 64 bytes. free(NULL) is a no-op. */
  void* (*alloc)(loom_device device, size_t bytes);
  void (*free)(loom_device device, void* ptr);

  /* Runtime services, NULL until the subsystem that provides them is running. */
  const loom_ops* ops;
  loom_mesh* mesh;
  loom_params* params;
  loom_hooks* hooks;
  loom_timers* timers;

  /* Optional services looked up by name (LOOM_SERVICE_*, below); NULL when absent or older than
   * min_minor. Lets a plugin use a newer service without a new major. */
  const void* (*service)(const char* name, uint32_t min_minor);

  /* Error sinks a plugin can own, to call other tables (the comm slot, the store) and read
   * their message back. */
  loom_error* (*error_new)(void);
  void (*error_free)(loom_error* err);
  const char* (*error_message)(const loom_error* err); /* borrowed; "" when none */
} loom_host;

/* ---- services (ABI 1.6), from loom_host.service(name, 6) ---------------------------------------- */

/* Where this process runs, available from create() on during `loom train` (NULL in commands that
 * only list or check plugins). Communicators come later, in each slot's setup context. */
#define LOOM_SERVICE_PLACEMENT "loom.placement"
typedef enum loom_axis {
  LOOM_AXIS_TP = 0,
  LOOM_AXIS_CP = 1,
  LOOM_AXIS_EP = 2,
  LOOM_AXIS_DP = 3,
  LOOM_AXIS_PP = 4,
  LOOM_AXES = 5
} loom_axis;
typedef struct loom_placement {
  loom_version v;
  int32_t rank, world;             /* in the job */
  int32_t local_rank, local_world; /* on this node */
  const char* host;                /* this node's name */
  int32_t axis_size[LOOM_AXES];    /* the mesh: tp -> cp -> ep -> dp -> pp, fastest first */
  int32_t axis_coord[LOOM_AXES];   /* this rank's coordinate on each axis */
} loom_placement;

/* Spans on this rank's timeline, written to <run dir>/trace/rankN.json when [run] trace = true
 * (a no-op otherwise). Any thread may call; name and category are copied. */
#define LOOM_SERVICE_TRACE "loom.trace"
typedef struct loom_trace {
  loom_version v;
  int64_t (*begin)(const char* name, const char* category); /* returns a token for end */
  void (*end)(int64_t token);
} loom_trace;

/* Other plugins, for a plugin that wraps one (a counting comm over gloo): creates the plugin
 * `name` of `kind` with the options of its own [plugins.<name>] table, checked against its
 * schema. *desc is its descriptor (cast it to the kind's table), *self its instance; give both
 * back to release. Wrapping a plugin of another kind or an unknown name is LOOM_BAD_CONFIG. */
#define LOOM_SERVICE_PLUGINS "loom.plugins"
struct loom_plugin; /* defined below; declared here so C sees one struct, not one per prototype */
typedef struct loom_plugins {
  loom_version v;
  loom_status (*create)(const char* name, int32_t kind, const struct loom_plugin** desc, void** self,
                        loom_error* err);
  void (*release)(const struct loom_plugin* desc, void* self);
} loom_plugins;

/* ---- plugin descriptors --------------------------------------------------------------------- */

typedef enum loom_kind {
  LOOM_KIND_COMM = 0,
  LOOM_KIND_PARALLEL = 1,
  LOOM_KIND_PRECISION = 2,
  LOOM_KIND_CKPT = 3
} loom_kind;

typedef enum loom_slot {
  LOOM_SLOT_NONE = 0, /* comm, precision and ckpt plugins have one slot each: their kind */
  LOOM_SLOT_DATA = 1,
  LOOM_SLOT_TENSOR = 2,
  LOOM_SLOT_SEQUENCE = 3,
  LOOM_SLOT_PIPELINE = 4,
  LOOM_SLOT_EXPERT = 5,
  LOOM_SLOT_CONTEXT = 6 /* ABI 1.5 */
} loom_slot;

/* First member of every kind-specific table, so a loom_plugin* can point at any of them. */
typedef struct loom_plugin {
  loom_version v;
  int32_t kind; /* loom_kind */
  int32_t slot; /* loom_slot */
  const char* name;    /* what a config names: "zero2", "fp16" */
  const char* version; /* the plugin's own version, "1.2.0" */
  const char* summary; /* one line for `loom plugins` */
  const loom_option_spec* options; /* NULL-name-terminated; may be NULL for none */

  /* > 0: can run here (higher is preferred when several could); 0: cannot, *why_not says why. */
  int32_t (*score)(const loom_host* host, const char** why_not);
  loom_status (*create)(const loom_host* host, const loom_options* opts, void** self,
                        loom_error* err);
  void (*destroy)(void* self);
  /* Optional extensions by name; NULL when not provided. */
  const void* (*get_proc)(const char* name);
} loom_plugin;

/* Precision: owns the numerics of GEMM operands. The runtime calls round_operand on each operand
 * (in place, fp32 storage) before the fp32-accumulating GEMM. */
typedef enum loom_operand_role {
  LOOM_OPERAND_WEIGHT = 0,
  LOOM_OPERAND_ACTIVATION = 1,
  LOOM_OPERAND_GRADIENT = 2
} loom_operand_role;

/* What a GEMM operand is cast through before the fp32-accumulating GEMM (ABI 1.1). */
typedef struct loom_operand_format {
  int32_t dtype; /* loom_dtype: LOOM_F32 leaves the operand as it is */
  float scale;   /* multiplied in before the cast, its inverse multiplied in after (1 = unscaled) */
} loom_operand_format;

typedef struct loom_precision_v1 {
  loom_plugin base;
  /* The storage format this precision computes in (for logs and MFU peak lookup). */
  int32_t compute_dtype; /* loom_dtype */
  int32_t exact;         /* 1: operands pass through unchanged, so the runtime skips the calls */
  /* ABI 1.0: rounds a copy of the operand in place. Used only when site_format is absent. */
  loom_status (*round_operand)(void* self, loom_tensor* t, int32_t role, loom_error* err);

  /* ---- ABI 1.1: the format policy. The plugin decides; the op table casts. ----
   * A site is one GEMM operand of the model ("h2.mlp.fc.w", "h2.mlp.fc.w.x",
   * "h2.mlp.fc.w.dy"); the runtime names each once, in the same order on every rank. */
  loom_status (*add_site)(void* self, const char* name, int32_t role, int32_t* id,
                          loom_error* err);
  /* The format and scale of a site for the current step. */
  loom_operand_format (*site_format)(void* self, int32_t id);
  /* What casting the site saw: amax of |x| before scaling, and whether any element clipped. */
  void (*observe)(void* self, int32_t id, float amax, int32_t clipped);
  /* The factor the loss gradient is multiplied by this step (1 = no loss scaling). */
  double (*loss_scale)(void* self);
  /* Values every rank must agree on before end_step (fp8 amaxes, clip flags). The runtime
   * reduces them in place with MAX over every rank that shares the sites. May set *n = 0.
   * Once site_format is set, every entry of this 1.1 policy must be. */
  loom_status (*step_stats)(void* self, float** data, int64_t* n, loom_error* err);
  /* Ends a step. found_inf: some rank's gradients hold inf or NaN (already global). *skip = 1:
   * the runtime must not apply this step's update. Loss scale and fp8 scales move here. */
  loom_status (*end_step)(void* self, int32_t found_inf, int32_t* skip, loom_error* err);
  /* Up to cap (name, value) pairs for this step's metrics line; returns how many. */
  int32_t (*metrics)(void* self, const char** names, double* values, int32_t cap);
  /* The scaling state (loss scale, fp8 amax histories and scales) for checkpoints. save_state
   * with buf NULL reports the size; load_state takes what save_state wrote. */
  loom_status (*save_state)(void* self, void* buf, size_t cap, size_t* bytes, loom_error* err);
  loom_status (*load_state)(void* self, const void* buf, size_t bytes, loom_error* err);
} loom_precision_v1;

/* Checkpoint writer: saves named byte blobs of one rank under a step directory. `save` may return
 * before the bytes are on disk (an async writer copies them first); `finish` makes them durable. */
typedef struct loom_ckpt_v1 {
  loom_plugin base;
  loom_status (*save)(void* self, const char* dir, const char* name, const void* data,
                      size_t bytes, loom_error* err);
  loom_status (*finish)(void* self, loom_error* err); /* returns when every save is durable */
  /* ---- ABI 1.1 ---- */
  /* Returns at once: LOOM_OK, or the error of a background write that already failed. */
  loom_status (*poll)(void* self, loom_error* err);
  /* Like save, but `data` stays valid and unchanged until the next finish(): a writer may write
   * straight from it instead of copying. NULL: the runtime calls save. */
  loom_status (*save_stable)(void* self, const char* dir, const char* name, const void* data,
                             size_t bytes, loom_error* err);

  /* ---- ABI 1.6: capabilities and the read path ---- */
  uint64_t capabilities; /* LOOM_CKPT_* flags */
  /* Before the first save or read: the checkpoint root (where step directories go), this rank and
   * the world. */
  loom_status (*open)(void* self, const char* root, int32_t rank, int32_t world, loom_error* err);
  /* A file a save wrote, as it was given to save: with buf NULL, *bytes = its size; otherwise
   * min(cap, size) bytes into buf. LOOM_SYSTEM, naming it, when it is not there. A writer that
   * stores files as they are given may leave read NULL: the runtime then reads the files. */
  loom_status (*read)(void* self, const char* dir, const char* name, void* buf, size_t cap,
                      size_t* bytes, loom_error* err);
  /* The names of the files saved under dir, each ended by '\n', with read's buf/cap convention. */
  loom_status (*list)(void* self, const char* dir, char* buf, size_t cap, size_t* bytes,
                      loom_error* err);
  /* Every rank: the save of step `step` is committed; its files, saved under dir ".tmp", are now
   * under dir (the runtime renamed the directory) and `latest` names it. */
  loom_status (*committed)(void* self, const char* dir, int64_t step, loom_error* err);
} loom_ckpt_v1;

/* loom_ckpt_v1.capabilities */
#define LOOM_CKPT_ASYNC 1 /* save() returns before the bytes are durable: the runtime commits a save
                           * at the next save (or the end), so training runs while it writes */

/* ---- communication (comm kind) ---------------------------------------------------------------- */

/* The rendezvous store, provided by the runtime: bytes under string keys, shared by every rank.
 * get blocks until the key exists or the store's timeout passes (then LOOM_SYSTEM). */
typedef struct loom_store {
  loom_version v;
  void* self;
  loom_status (*set)(void* self, const char* key, const void* data, size_t bytes, loom_error* err);
  /* *data is valid until the next call on this store from this thread. */
  loom_status (*get)(void* self, const char* key, const void** data, size_t* bytes,
                     loom_error* err);
  loom_status (*add)(void* self, const char* key, int64_t delta, int64_t* value, loom_error* err);
  int64_t timeout_ms;
} loom_store;

typedef struct loom_comm loom_comm; /* one communicator (a group of ranks), owned by the plugin */
typedef struct loom_work loom_work; /* an issued asynchronous operation */

typedef enum loom_reduce_op {
  LOOM_REDUCE_SUM = 0,
  LOOM_REDUCE_AVG = 1,
  LOOM_REDUCE_MAX = 2,
  LOOM_REDUCE_MIN = 3
} loom_reduce_op;

/* OR-ed into an all_reduce op: this buffer will be reduced again, same pointer, shape and op
 * (a gradient bucket, a bench buffer), so the backend may keep per-buffer state such as a built
 * algorithm between calls. Every rank must pass it on the same calls. */
#define LOOM_COMM_PERSISTENT 0x100

/* Every operation takes `work`: NULL runs it to completion before returning; non-NULL issues it
 * and returns a handle at once, to be passed to wait() exactly once. Operations on one
 * communicator complete in the order they were issued. Tensors are contiguous, on the comm's
 * device, and must stay alive until the operation completes. A peer that is gone or silent past
 * the timeout gives LOOM_FATAL with a message naming the operation and the peer. */
typedef struct loom_comm_v1 {
  loom_plugin base;
  /* The world communicator, bootstrapped through the store. */
  loom_status (*init)(void* self, const loom_store* store, int32_t rank, int32_t size,
                      int64_t timeout_ms, loom_comm** out, loom_error* err);
  /* Collective over `parent`: ranks with the same color form a new communicator, ordered by key. */
  loom_status (*split)(void* self, loom_comm* parent, int32_t color, int32_t key, loom_comm** out,
                       loom_error* err);
  void (*free_comm)(void* self, loom_comm* comm);
  int32_t (*rank)(void* self, const loom_comm* comm);
  int32_t (*size)(void* self, const loom_comm* comm);

  loom_status (*all_reduce)(void* self, loom_comm* comm, loom_tensor* buf, int32_t op,
                            loom_work** work, loom_error* err);
  /* in holds size * n elements; out (n) receives this rank's reduced block. */
  loom_status (*reduce_scatter)(void* self, loom_comm* comm, const loom_tensor* in,
                                loom_tensor* out, int32_t op, loom_work** work, loom_error* err);
  /* in holds n elements; out (size * n) receives every rank's block in rank order. */
  loom_status (*all_gather)(void* self, loom_comm* comm, const loom_tensor* in, loom_tensor* out,
                            loom_work** work, loom_error* err);
  loom_status (*broadcast)(void* self, loom_comm* comm, loom_tensor* buf, int32_t root,
                           loom_work** work, loom_error* err);
  /* Block i of `in` goes to rank i. With counts NULL every block is numel / size elements;
   * otherwise send_counts[i] / recv_counts[i] elements, packed in rank order. */
  loom_status (*all_to_all)(void* self, loom_comm* comm, const loom_tensor* in, loom_tensor* out,
                            const int64_t* send_counts, const int64_t* recv_counts,
                            loom_work** work, loom_error* err);
  loom_status (*send)(void* self, loom_comm* comm, const loom_tensor* buf, int32_t peer,
                      int32_t tag, loom_work** work, loom_error* err);
  loom_status (*recv)(void* self, loom_comm* comm, loom_tensor* buf, int32_t peer, int32_t tag,
                      loom_work** work, loom_error* err);
  loom_status (*barrier)(void* self, loom_comm* comm, loom_error* err);
  /* Completes and frees an issued operation. */
  loom_status (*wait)(void* self, loom_work* work, loom_error* err);
} loom_comm_v1;

/* The parallel slots' tables: data, tensor, sequence, pipeline. */
#include <loom/plugin_parallel.h>

/* ---- the one exported entry ------------------------------------------------------------------ */

/* Returns the library's descriptors in *out (static storage, *count entries). Called once per
 * process; `host` stays valid for the life of the process. */
typedef loom_status (*loom_plugin_entry_v1_fn)(const loom_host* host,
                                               const loom_plugin* const** out, size_t* count,
                                               loom_error* err);

#define LOOM_PLUGIN_ENTRY_V1 "loom_plugin_entry_v1"

#ifdef __cplusplus
}
#endif

#endif /* LOOM_PLUGIN_H */
