/*
 * Loom plugin ABI 3: the host table (what the runtime offers every plugin) and the services a
 * plugin asks for by name. Self-contained C11; <loom/plugin.h> includes it.
 */
#ifndef LOOM_HOST_H
#define LOOM_HOST_H

#include <loom/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Given to the plugin entry and to create(); valid for the life of the process. */
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

  /* A service (LOOM_SERVICE_*, below) for the plugin named `plugin`: NULL when this runtime or
   * command has none, when it is older than min_minor, or when the plugin's descriptor does not
   * list the service in loom_plugin.services. The list is what `loom plugins info` shows. */
  const void* (*service)(const char* plugin, const char* name, uint32_t min_minor);

  /* Error sinks a plugin can own, to call other tables (the comm slot, the store) and read
   * their message back. */
  loom_error* (*error_new)(void);
  void (*error_free)(loom_error* err);
  const char* (*error_message)(const loom_error* err); /* borrowed; "" when none */
} loom_host;

/* ---- services ------------------------------------------------------------------------------- */

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

/* The op table of the device this process trains on (<loom/ops.h>'s; an ABI 1 or 2 plugin gets
 * ABI 2's), from create() on during `loom train`: a comm plugin that takes device memory orders its
 * copies against the compute stream with it (loom_ops.record_event, wait_event, copy on
 * LOOM_STREAM_COMM). The service is the table itself. */
#define LOOM_SERVICE_DEVICE "loom.device"

/* The device's own stream handles (since ABI 2.4; min_minor 0 under ABI 3), for a plugin that
 * issues work on them itself (NCCL on the comm stream): stream(LOOM_STREAM_COMPUTE or _COMM) is a
 * cudaStream_t on CUDA. NULL on devices without native streams (cpu, strict). Order work against
 * the table's own with loom.device's record_event and wait_event. */
#define LOOM_SERVICE_NATIVE_STREAMS "loom.native_streams"
typedef struct loom_native_streams {
  loom_version v;
  void* (*stream)(int32_t which);
} loom_native_streams;

/* Other plugins, for a plugin that wraps one (a counting comm over gloo): creates the plugin
 * `name` of `kind` with the options of its own [plugins.<name>] table, checked against its
 * schema. *desc is its descriptor (cast it to the kind's table), *self its instance; give both
 * back to release. Wrapping a plugin of another kind or an unknown name is LOOM_BAD_CONFIG. */
#define LOOM_SERVICE_PLUGINS "loom.plugins"
struct loom_plugin; /* plugin.h defines it; declared here so C sees one struct, not one per
                       prototype */
typedef struct loom_plugins {
  loom_version v;
  loom_status (*create)(const char* name, int32_t kind, const struct loom_plugin** desc,
                        void** self, loom_error* err);
  void (*release)(const struct loom_plugin* desc, void* self);
} loom_plugins;

/* Where the run is (ABI 3.0), for every slot that acts per step: the service is the struct
 * itself, which the runtime keeps current, so read it during any call. NULL outside `loom train`.
 * step counts training steps from 1 (0 before the first; a skipped update counts, unlike AdamW's
 * own count); micro_batch is the index within the
 * step of the forward or backward running now (-1 between them); training is 0 while the model
 * evaluates (validation, samples). seed is [run] seed. */
#define LOOM_SERVICE_STEP "loom.step"
typedef struct loom_step_info {
  loom_version v;
  int64_t step;
  uint64_t seed;
  int32_t micro_batch;
  int32_t micro_batches; /* per step on this rank */
  int32_t training;
  int32_t reserved;
} loom_step_info;

/* The job's configuration beyond the plugin's own table (ABI 3.0): a validate hook or create()
 * reads other sections' values by their dotted key ("train.steps", "parallel.dp"), so a rule
 * such as "k divides [train] steps" can be said. Each returns LOOM_OK with the value, or
 * LOOM_BAD_CONFIG when the key is unknown or of another type (the message names it). */
#define LOOM_SERVICE_CONFIG "loom.config"
typedef struct loom_config_reader {
  loom_version v;
  loom_status (*get_i64)(const char* key, int64_t* out, loom_error* err);
  loom_status (*get_f64)(const char* key, double* out, loom_error* err);
  /* *out is borrowed until this thread's next get_str */
  loom_status (*get_str)(const char* key, const char** out, loom_error* err);
} loom_config_reader;

#ifdef __cplusplus
}
#endif

#endif /* LOOM_HOST_H */
