/*
 * Loom plugin ABI 3: the plain types every table uses (versions, statuses, tensors, options).
 * Self-contained C11; <loom/plugin.h> includes it.
 */
#ifndef LOOM_TYPES_H
#define LOOM_TYPES_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LOOM_ABI_MAJOR 3
/* 3.0 typed the op table (loom_ref arguments, a dtype mask per operation, one entry per
 * operation), gave loom_cost_collective `every`, added the loom.step and loom.config services and
 * the data hooks, and exports loom_plugin_entry_v3; every plugin table keeps ABI 2's layout and
 * name.
 * ABI 2 ended at 2.7 (narrow GEMM operands); ABI 1 and 2 binaries load through the runtime's
 * adapters (docs/plugins.md has the whole changelog). */
#define LOOM_ABI_MINOR 0

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
  { (uint16_t) LOOM_ABI_MAJOR, (uint16_t)LOOM_ABI_MINOR, (uint32_t)sizeof(type) }

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

/* LOOM_DEVICE_STRICT (ABI 2.2): the CPU emulating a discrete GPU ([run] device = "strict"). */
typedef enum loom_device_kind {
  LOOM_DEVICE_CPU = 0,
  LOOM_DEVICE_CUDA = 1,
  LOOM_DEVICE_STRICT = 2
} loom_device_kind;

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

/* Limits on a plugin's options, which the runtime checks (in `loom config check` too) before
 * create(): loom_plugin.option_rules is an array ended by a NULL name; an option without a rule is
 * unlimited. */
typedef struct loom_option_rule {
  const char* name;    /* an option of the schema */
  double min, max;     /* INT and FLOAT options: the inclusive range; min > max means none */
  const char* choices; /* STRING options: the allowed values, "|"-separated; NULL = any */
  int32_t required;    /* 1: the user must set it in [plugins.<name>]; the default is not used */
} loom_option_rule;

/* What the schema and the rules cannot say (two options that must agree): called with the checked,
 * filled options before create() and by `loom config check`, without an instance. Returns
 * LOOM_BAD_CONFIG with a message naming the keys. */
struct loom_host;
typedef loom_status (*loom_validate_options_fn)(const struct loom_host* host,
                                                const loom_options* opts, loom_error* err);

typedef enum loom_log_level {
  LOOM_LOG_DEBUG = 0,
  LOOM_LOG_INFO = 1,
  LOOM_LOG_WARN = 2,
  LOOM_LOG_ERROR = 3
} loom_log_level;

#ifdef __cplusplus
}
#endif

#endif /* LOOM_TYPES_H */
