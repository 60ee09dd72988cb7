/*
 * Loom plugin ABI, version 3.
 *
 * The whole boundary between the Loom runtime and a strategy plugin. Plain C11: no C++ types, no
 * exceptions, no ownership of runtime memory crosses it. A plugin written in C++20 uses
 * <loom/sdk.hpp>, which builds these tables from a class.
 *
 *   <loom/types.h>            versions, statuses, tensors, option schemas
 *   <loom/ops.h>              the op table (the device's kernels)
 *   <loom/host.h>             the host table and the services
 *   <loom/plugin.h>           this file: descriptors, and the precision, checkpoint and comm tables
 *   <loom/plugin_parallel.h>  the parallel slots' tables (data, tensor, sequence, pipeline, expert,
 *                             context) and the planner's cost entry; included from here
 *
 * Rules that keep it stable:
 *  - Every table starts with a loom_plugin whose v = {3, minor, sizeof(table)}. The tables named
 *    _v2 kept ABI 2's layout in ABI 3 (the op table and the cost entry's element changed; new
 *    features came as services and get_proc extensions), so their names stay.
 *  - A table of this major is frozen: it never gains a field. A later feature is either a new
 *    major's table (exported by loom_plugin_entry_v4 beside v3) or an extension found by name
 *    through get_proc. The runtime keeps loading older majors' binaries through adapters: an
 *    ABI 1 or ABI 2 plugin receives ABI 2's op table, the one it was built against.
 *  - Entries marked "optional" may be NULL; every other entry must be set, and the runtime
 *    refuses a table that leaves one NULL, naming it, when the library is loaded.
 *  - Strings handed to the plugin are borrowed for the duration of the call unless said otherwise;
 *    strings and arrays the plugin hands back (names, help, schemas) must live as long as the
 *    library.
 *  - A library exports one symbol, loom_plugin_entry_v3.
 */
#ifndef LOOM_PLUGIN_H
#define LOOM_PLUGIN_H

#include <loom/host.h>
#include <loom/ops.h>

#ifdef __cplusplus
extern "C" {
#endif

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
  LOOM_SLOT_CONTEXT = 6
} loom_slot;

/* First member of every kind's table, so a loom_plugin* can point at any of them. */
typedef struct loom_plugin {
  loom_version v;
  int32_t kind;        /* loom_kind */
  int32_t slot;        /* loom_slot */
  const char* name;    /* what a config names: "zero2", "fp16" */
  const char* version; /* the plugin's own version, "1.2.0" */
  const char* summary; /* one line for `loom plugins` */
  const loom_option_spec*
      options; /* the [plugins.<name>] schema, NULL-name-terminated (optional) */
  const loom_option_rule*
      option_rules; /* limits on those options, NULL-name-terminated (optional) */
  loom_validate_options_fn validate_options; /* what the rules cannot say (optional) */
  const char*
      services; /* the LOOM_SERVICE_* names it asks the host for, "|"-separated (optional) */

  /* > 0: can run here (higher is preferred when several could); 0: cannot, *why_not says why.
   * Optional: NULL means it can always run. */
  int32_t (*score)(const loom_host* host, const char** why_not);
  loom_status (*create)(const loom_host* host, const loom_options* opts, void** self,
                        loom_error* err);
  void (*destroy)(void* self);
  /* Extensions added after 2.0, by name (optional). */
  const void* (*get_proc)(const char* name);
} loom_plugin;

/* ---- precision (LOOM_KIND_PRECISION): the numerics of GEMM operands -------------------------- */

/* What a GEMM operand is: the runtime names it with its site. */
typedef enum loom_operand_role {
  LOOM_OPERAND_WEIGHT = 0,
  LOOM_OPERAND_ACTIVATION = 1,
  LOOM_OPERAND_GRADIENT = 2
} loom_operand_role;

/* What a GEMM operand is cast through before the fp32-accumulating GEMM. */
typedef struct loom_operand_format {
  int32_t dtype; /* loom_dtype (LOOM_F32 leaves the operand as it is), or LOOM_FORMAT_PLUGIN */
  float scale;   /* multiplied in before the cast, its inverse multiplied in after (1 = unscaled) */
} loom_operand_format;

/* loom_operand_format.dtype: the plugin rounds the operand itself, in round_site. */
#define LOOM_FORMAT_PLUGIN (-1)

/* The plugin is the policy; the runtime's op table does the cast (quantize), so the same plugin
 * drives a CPU emulation or a device's native narrow GEMMs. A site is one GEMM operand of the
 * model ("h2.mlp.fc.w", "h2.mlp.fc.w.x", "h2.mlp.fc.w.dy"); the runtime names each once, in the
 * same order on every rank. An exact precision (fp32) sets exact = 1 and leaves every entry NULL.
 */
typedef struct loom_precision_v2 {
  loom_plugin base;
  int32_t compute_dtype; /* loom_dtype this precision computes in (for logs and the MFU peak) */
  int32_t exact;         /* 1: operands pass unchanged: the runtime names no sites */
  /* Required unless exact. */
  loom_status (*add_site)(void* self, const char* name, int32_t role, int32_t* id, loom_error* err);
  /* The format and scale of a site for the current step. */
  loom_operand_format (*site_format)(void* self, int32_t id);
  /* Rounds a copy of the operand in place (fp32 storage) for a site whose format is
   * LOOM_FORMAT_PLUGIN. Optional: required only by a plugin that returns that format. */
  loom_status (*round_site)(void* self, int32_t id, loom_tensor* t, loom_error* err);
  /* Optional: what casting the site saw: amax of |x| before scaling, and whether any clipped. */
  void (*observe)(void* self, int32_t id, float amax, int32_t clipped);
  /* Optional: the factor the loss gradient is multiplied by this step (NULL: 1). */
  double (*loss_scale)(void* self);
  /* Optional: values every rank must agree on before end_step (fp8 amaxes, clip flags). The
   * runtime reduces them in place with MAX over every rank that shares the sites. */
  loom_status (*step_stats)(void* self, float** data, int64_t* n, loom_error* err);
  /* Optional: ends a step. found_inf: some rank's gradients hold inf or NaN (already global).
   * *skip = 1: the runtime must not apply this step's update. Loss and fp8 scales move here. */
  loom_status (*end_step)(void* self, int32_t found_inf, int32_t* skip, loom_error* err);
  /* Optional: up to cap (name, value) pairs for this step's metrics line; returns how many. */
  int32_t (*metrics)(void* self, const char** names, double* values, int32_t cap);
  /* Optional, both or neither: the scaling state (loss scale, amax histories) for checkpoints.
   * save_state with buf NULL reports the size; load_state takes what save_state wrote. */
  loom_status (*save_state)(void* self, void* buf, size_t cap, size_t* bytes, loom_error* err);
  loom_status (*load_state)(void* self, const void* buf, size_t bytes, loom_error* err);
} loom_precision_v2;

/* ---- checkpoints (LOOM_KIND_CKPT) -------------------------------------------------------------
 */

/* Saves named byte blobs of one rank under a step directory. `save` may return before the bytes
 * are on disk (an async writer copies them first); `finish` makes them durable. */
typedef struct loom_ckpt_v2 {
  loom_plugin base;
  uint64_t capabilities; /* LOOM_CKPT_* flags */
  /* Before the first save or read: the checkpoint root (where step directories go), this rank and
   * the world. Optional. */
  loom_status (*open)(void* self, const char* root, int32_t rank, int32_t world, loom_error* err);
  loom_status (*save)(void* self, const char* dir, const char* name, const void* data, size_t bytes,
                      loom_error* err);
  /* Optional: like save, but `data` stays valid and unchanged until the next finish(), so a
   * writer may write straight from it instead of copying. NULL: the runtime calls save. */
  loom_status (*save_stable)(void* self, const char* dir, const char* name, const void* data,
                             size_t bytes, loom_error* err);
  loom_status (*finish)(void* self, loom_error* err); /* returns when every save is durable */
  /* Optional: returns at once: LOOM_OK, or the error of a background write that already failed. */
  loom_status (*poll)(void* self, loom_error* err);
  /* Optional: every rank: the save of step `step` is committed; its files, saved under dir
   * ".tmp", are now under dir (the runtime renamed the directory) and `latest` names it. */
  loom_status (*committed)(void* self, const char* dir, int64_t step, loom_error* err);
  /* Optional, both or neither: the read path. read: a file a save wrote, as it was given to
   * save: with buf NULL, *bytes = its size; otherwise min(cap, size) bytes into buf; LOOM_SYSTEM,
   * naming it, when it is not there. list: the names saved under dir, each ended by '\n', with
   * read's buf/cap convention. A writer that stores files as they are given leaves both NULL and
   * the runtime reads the files. */
  loom_status (*read)(void* self, const char* dir, const char* name, void* buf, size_t cap,
                      size_t* bytes, loom_error* err);
  loom_status (*list)(void* self, const char* dir, char* buf, size_t cap, size_t* bytes,
                      loom_error* err);
} loom_ckpt_v2;

/* loom_ckpt_v2.capabilities */
#define LOOM_CKPT_ASYNC                                                        \
  1 /* save() returns before the bytes are durable: the runtime commits a save \
     * at the next save (or the end), so training runs while it writes */

/* ---- communication (comm kind) ----------------------------------------------------------------
 */

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
typedef struct loom_comm_v2 {
  loom_plugin base;
  /* required: all but send and recv (NULL: this backend has no point-to-point; pipelines and
   * ring attention then refuse it) */
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

  /* ---- added in ABI 2.4 (check LOOM_HAS_FIELD before use) ---- */
  /* The sends and receives issued on `comm` between group_start and group_end start together
   * (NCCL's ncclGroupStart/End): a backend whose unmatched send or receive holds up its stream
   * needs them so. The runtime issues one group per exchange of a pipeline schedule and per ring
   * step, paired on every rank: the k-th group two ranks share holds one's sends as the other's
   * receives. NULL: every operation stands alone (gloo, MPI). */
  loom_status (*group_start)(void* self, loom_comm* comm, loom_error* err);
  loom_status (*group_end)(void* self, loom_comm* comm, loom_error* err);
  /* LOOM_COMM_* flags: what the backend declares it offers, read without creating it. */
  uint64_t capabilities;
} loom_comm_v2;

/* loom_comm_v2.capabilities (ABI 2.4). A table with send and recv that does not declare
 * LOOM_COMM_P2P is refused for pipelines and ring attention at config time, naming it. */
#define LOOM_COMM_P2P 0x1ull

/* A comm plugin's optional extension (ABI 2.2), found by get_proc(LOOM_COMM_DEVICES): a
 * `const uint32_t*` mask of the device kinds (1u << loom_device_kind) whose memory its operations
 * take. Without it a backend takes host memory only, and on a device whose memory the host cannot
 * reach (strict, cuda) the runtime stages every buffer through pinned host copies on the comm
 * stream, as a GPU cluster without NCCL does. */
#define LOOM_COMM_DEVICES "loom_comm_devices"

/* The parallel slots' tables: data, tensor, sequence, pipeline, expert, context. */
#include <loom/plugin_parallel.h>

/* ---- the one exported entry ------------------------------------------------------------------ */

/* Returns the library's descriptors in *out (static storage, *count entries). Called once per
 * process; `host` stays valid for the life of the process. */
typedef loom_status (*loom_plugin_entry_v3_fn)(const loom_host* host,
                                               const loom_plugin* const** out, size_t* count,
                                               loom_error* err);

#define LOOM_PLUGIN_ENTRY_V3 "loom_plugin_entry_v3"

#ifdef __cplusplus
}
#endif

#endif /* LOOM_PLUGIN_H */
