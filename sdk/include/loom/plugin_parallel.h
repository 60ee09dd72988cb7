/*
 * Loom plugin ABI, version 3: the parallel slots (data, tensor, sequence, pipeline, expert,
 * context), and the planner's cost entry that each of them may fill.
 * Included by <loom/plugin.h>, inside its extern "C" block; include that instead. The rules at
 * the top of plugin.h hold here too.
 */
#ifndef LOOM_PLUGIN_PARALLEL_H
#define LOOM_PLUGIN_PARALLEL_H

#ifndef LOOM_PLUGIN_H
#error "loom/plugin_parallel.h is part of <loom/plugin.h>: include <loom/plugin.h> instead"
#endif

/* ---- what a strategy costs, for `loom plan` (the optional `cost` entry of every parallel table) -
 */

/* One layout as the planner sees it, from this strategy's point of view. Sizes are per rank. */
typedef struct loom_cost_query {
  loom_version v;        /* {2, 0, sizeof}: the runtime may append fields; read v.size first */
  int32_t group;         /* ranks in this strategy's group (its mesh axis) */
  int32_t zero_stage;    /* the data slot's stage, for plugins that wrap it */
  int64_t params;        /* parameters this rank's model part holds (after tp and pp) */
  int64_t expert_params; /* of them, those in expert MLPs (their gradients reduce over expert_dp) */
  int32_t expert_dp;     /* ranks that share this rank's experts */
  int32_t grad_bytes;    /* bytes per gradient element on the wire */
  int32_t act_bytes;     /* bytes per activation element */
  int64_t tokens;        /* tokens in one micro-batch on this rank (micro_batch x seq_len / cp) */
  int64_t d_model;
  int64_t kv_width;   /* width of k and v together, per token (2 x kv heads x head_dim / tp) */
  int32_t layers;     /* transformer blocks this rank runs */
  int32_t moe_layers; /* of them, MoE blocks */
  int32_t top_k;
  int32_t microbatches;      /* per step */
  int32_t chunks;            /* pipeline model chunks per rank (interleaved: > 1) */
  int32_t sequence_parallel; /* 1: an sp plugin fills the sequence slot beside tp */
  int32_t tp; /* the tensor-parallel degree (activations whole on each tp rank unless sp) */
  /* 2.1: 1 when the ranks' collectives run on the CPU cores their compute uses (a CPU cluster:
   * gloo's threads copy through the same cores), so overlapping them with compute gains nothing.
   * Check LOOM_HAS_FIELD(q, loom_cost_query, comm_shares_cores) first. */
  int32_t comm_shares_cores;
} loom_cost_query;

typedef enum loom_cost_op {
  LOOM_COST_ALL_REDUCE = 0,
  LOOM_COST_REDUCE_SCATTER = 1,
  LOOM_COST_ALL_GATHER = 2,
  LOOM_COST_ALL_TO_ALL = 3,
  LOOM_COST_SEND_RECV = 4 /* to one neighbour; the sender's and the receiver's time */
} loom_cost_op;

typedef enum loom_cost_phase {
  LOOM_COST_FORWARD = 0,  /* during the micro-batches' forwards */
  LOOM_COST_BACKWARD = 1, /* during their backwards */
  LOOM_COST_STEP = 2      /* after the last backward, around the optimizer */
} loom_cost_phase;

/* One collective a step issues: `calls` times a buffer of `bytes` (S as nccl-tests counts it:
 * the whole buffer; for all_gather and reduce_scatter the gathered size). hidden: the fraction of
 * its time the strategy overlaps with compute of the same phase (DDP buckets 1, ring attention
 * 1, a blocking Megatron all-reduce 0); the planner caps it at the compute there is. */
typedef struct loom_cost_collective {
  int32_t op;    /* loom_cost_op */
  int32_t phase; /* loom_cost_phase */
  int64_t bytes;
  int64_t calls;
  double hidden;
  int32_t group; /* ranks it spans; 0 = the query's group */
  char what[40]; /* "gradient all-reduce", shown by loom plan --explain */
  int32_t axis;  /* another mesh axis it runs on, LOOM_AXIS_* + 1 (a pipeline's all-gather over tp);
                  * 0: the strategy's own */
  int32_t every; /* (3.0) steps between two issues of it (local SGD's average every k steps): the
                  * planner counts calls / every per step; 0 or 1: every step */
} loom_cost_collective;

/* The step's collectives for `q`, *n of them, written to out when *n <= cap (call with cap 0 to
 * size). `plugin` is the descriptor the entry belongs to, `opts` its [plugins.<name>] options as a
 * run would get them (defaults filled), so an option that changes the traffic (a wire dtype, a
 * bucket size) changes the plan. A plugin without the entry is planned as if it communicated
 * nothing, and `loom plan` says so. */
typedef loom_status (*loom_cost_fn)(const struct loom_plugin* plugin, const loom_options* opts,
                                    const loom_cost_query* q, loom_cost_collective* out,
                                    int64_t cap, int64_t* n, loom_error* err);

/* ---- the data slot (parallel kind, LOOM_SLOT_DATA) ------------------------------------------- */

typedef struct loom_param_info {
  const char* name;
  int64_t offset; /* into the flat value and gradient buffers, in elements */
  int64_t numel;
} loom_param_info;

/* A contiguous range of the flat buffers holding one layer's parameters. */
typedef struct loom_data_unit {
  int64_t offset;
  int64_t numel;
} loom_data_unit;

/* acquire_params flags: the pass is backward; the unit is the layer's own, so the
 * plugin may start gathering the next unit in the pass's direction. */
#define LOOM_ACQUIRE_BACKWARD 1
#define LOOM_ACQUIRE_PREFETCH 2

/* Per-parameter flags. */
#define LOOM_PARAM_DECAY 1      /* AdamW weight decay applies */
#define LOOM_PARAM_TP_SHARDED 2 /* tp ranks hold different slices: a norm sums it over tp */
#define LOOM_PARAM_MIRROR 4     /* a copy another pp stage owns: a norm skips it */
#define LOOM_PARAM_EXPERT 8     /* an expert's, held by one ep rank: reduced over expert_dp */

/* What a data-parallel strategy works on: the dp communicator and the model as flat buffers. */
typedef struct loom_data_context {
  loom_version v;
  const loom_comm_v2* comm;
  void* comm_self;
  loom_comm* dp; /* the data-parallel group */
  /* The live parameter buffer, not a copy: numel floats (device memory on a discrete device)
   * that hold the initial values at setup, that the forward reads and that the optimizer
   * updates in place, so what a plugin writes there is the model. A sharding plugin copies
   * what it keeps during setup. */
  float* values;
  float* grads;
  int64_t numel;
  const loom_param_info* params; /* in declaration order */
  int64_t n_params;
  /* What a plugin that shards model state (ZeRO) needs. */
  const loom_data_unit* units; /* one per layer, in model order; every parameter in exactly one */
  int64_t n_units;
  const int32_t* param_flags; /* LOOM_PARAM_* per parameter */
  const loom_ops* ops;
  /* Expert parallelism (ep > 1; NULL otherwise). `dp` is then the data group: the dp x ep
   * ranks that split the batch. A LOOM_PARAM_EXPERT parameter is held by the ranks of its ep
   * coordinate only, and every rank of the data group fed it tokens through the expert slot: its
   * gradient is the SUM over expert_dp (the dp ranks holding the same experts) divided by the size
   * of `dp`, which is `dp`'s average scaled by size(expert_dp) / size(dp). A unit never mixes
   * expert and other parameters. A data plugin that does not declare LOOM_DATA_EXPERTS is refused
   * with ep > 1. */
  loom_comm* expert_dp;
} loom_data_context;

/* A run of one parameter's elements in a rank's ZeRO shard: elements [begin, begin +
 * count) of the parameter's local (tp) slice in row-major order, with their values, AdamW
 * moments and gradient. The pointers are the plugin's memory, valid until its next step. */
typedef struct loom_shard_piece {
  int64_t param;
  int64_t begin, count;
  float* value;
  float* adam_m;
  float* adam_v;
  float* grad; /* the reduced gradient, between finish_grads and step */
} loom_shard_piece;

/* One optimizer step's AdamW hyper-parameters. grad_scale multiplies the gradients
 * first (loss-scale removal and clipping); step counts applied updates from 1. */
typedef struct loom_adamw {
  double lr, beta1, beta2, eps, weight_decay, grad_scale;
  int64_t step;
} loom_adamw;

/* The common head of the data slot's two kinds. capabilities says which one a table is: with
 * LOOM_DATA_SHARDED it is a loom_data_sharded_v2, otherwise a loom_data_replicated_v2. */
typedef struct loom_data_v2 {
  loom_plugin base;
  /* What this plugin handles (LOOM_DATA_*). The runtime refuses a layout that needs a capability
   * the plugin does not declare, naming both, before training. */
  uint64_t capabilities;
  loom_cost_fn cost; /* optional */
  loom_status (*setup)(void* self, const loom_data_context* ctx, loom_error* err);
  /* Returns when every gradient is reduced (averaged over dp). Reports the time spent in
   * communication and the part of it not hidden behind compute. */
  loom_status (*finish_grads)(void* self, double* comm_ms, double* exposed_comm_ms,
                              loom_error* err);
  /* Bytes this rank holds and moved: out[0] parameters, [1] gradients, [2] optimizer states,
   * [3] communication buffers (peak), [4] bytes this rank sent in the last step. A replicated
   * plugin, which leaves model state to the runtime, reports 0 for [0..2]. */
  loom_status (*accounting)(void* self, int64_t* out, loom_error* err);
  /* Optional, both or neither: state of the plugin's own that training depends on (an
   * error-feedback residual, a local-SGD anchor), saved in every checkpoint, per rank: with buf
   * NULL, *bytes = its size; otherwise write it (cap >= size). load_state gets back what this
   * rank saved, after setup, when a run resumes on the same layout. */
  loom_status (*save_state)(void* self, void* buf, size_t cap, size_t* bytes, loom_error* err);
  loom_status (*load_state)(void* self, const void* buf, size_t bytes, loom_error* err);
} loom_data_v2;

/* Model state stays replicated in the runtime's buffers, and the runtime steps the optimizer
 * (DDP). The plugin reduces the gradients. */
typedef struct loom_data_replicated_v2 {
  loom_data_v2 data;
  /* Called during the last micro-batch's backward as each parameter's gradient becomes final. */
  loom_status (*grad_ready)(void* self, int64_t param, loom_error* err);
} loom_data_replicated_v2;

/* The plugin owns and shards parameters, gradients and optimizer states (ZeRO); the runtime uses
 * these entries instead of its buffers. */
typedef struct loom_data_sharded_v2 {
  loom_data_v2 data;
  /* 1, 2 or 3: the ZeRO stage of this instance (it may depend on the options). */
  int32_t (*stage)(void* self);
  /* Unit u's full parameter values, gathered if they are sharded; valid until release_params.
   * flags: LOOM_ACQUIRE_*. */
  loom_status (*acquire_params)(void* self, int64_t unit, int32_t flags, float** values,
                                loom_error* err);
  loom_status (*release_params)(void* self, int64_t unit, loom_error* err);
  /* Where unit u's gradients accumulate during this micro-batch's backward. */
  loom_status (*grad_buffer)(void* self, int64_t unit, float** grads, loom_error* err);
  /* Every layer using unit u has run this micro-batch's backward; last: the step's last one. */
  loom_status (*unit_grads_ready)(void* self, int64_t unit, int32_t last, loom_error* err);
  /* Over this rank's shard, after finish_grads: sums of squares of [0] parameters without
   * LOOM_PARAM_TP_SHARDED, [1] those with it, of the gradients (which = 0) or values (1). */
  loom_status (*sum_squares)(void* self, int32_t which, double* out, loom_error* err);
  /* AdamW over this rank's shard, then whatever makes the parameters usable for the next step. */
  loom_status (*step)(void* self, const loom_adamw* hp, loom_error* err);
  /* This rank's shard as pieces, for checkpoints: *n pieces, written to out when n <= cap. */
  loom_status (*shard_pieces)(void* self, loom_shard_piece* out, int64_t cap, int64_t* n,
                              loom_error* err);
  /* The runtime wrote resumed values and moments into the pieces: make the parameters whole. */
  loom_status (*pieces_loaded)(void* self, loom_error* err);
} loom_data_sharded_v2;

/* The moments of the runtime's AdamW (a replicated plugin's model state), live: numel floats each
 * beside loom_data_context.values, on ops->device. A plugin may read and write them; the next
 * update uses what they hold. */
typedef struct loom_optimizer_state {
  loom_version v;
  float* adam_m;
  float* adam_v;
  int64_t numel;
} loom_optimizer_state;

/* Hooks around a replicated data plugin's step (ABI 3.0), found through its get_proc as
 * LOOM_DATA_HOOKS, each optional (a sharded plugin's are not called). s is the loom.step
 * service's struct. */
#define LOOM_DATA_HOOKS "loom_data_hooks"
typedef struct loom_data_hooks {
  loom_version v;
  /* Before the step's first forward. */
  loom_status (*before_forward)(void* self, const loom_step_info* s, loom_error* err);
  /* After the optimizer's update (also after a skipped one: updated = 0). The plugin may rewrite
   * the parameters (loom_data_context.values) and the moments. */
  loom_status (*after_update)(void* self, const loom_step_info* s, int32_t updated,
                              const loom_optimizer_state* o, loom_error* err);
  /* With LOOM_DATA_DIVERGES: 1 when the replicas' parameters are equal after step `step` (a sync
   * step), 0 between syncs. The runtime checks the replicas at sync steps only. */
  int32_t (*replicas_synced)(void* self, int64_t step);
} loom_data_hooks;

/* loom_data_v2.capabilities */
#define LOOM_DATA_EXPERTS 1 /* ep > 1: the expert-gradient rule of loom_data_context.expert_dp */
#define LOOM_DATA_PIPELINE                                           \
  2 /* pp > 1: the context lists this stage's parameters only, and a \
     * LOOM_PARAM_MIRROR copy is left out of sum_squares */
#define LOOM_DATA_SHARDED \
  4 /* the table is a loom_data_sharded_v2: the plugin owns the model state */
#define LOOM_DATA_DEVICE                                                    \
  8 /* (ABI 2.5) the model state it owns lives on ops->device (host->alloc) \
     * and is touched only by ops' kernels and copies: a sharded plugin     \
     * without it is refused on a device the host cannot reach */
#define LOOM_DATA_DIVERGES                                                  \
  16 /* (ABI 3.0) the replicas differ between syncs (local SGD): a          \
      * replicated plugin with LOOM_DATA_HOOKS' replicas_synced, whose      \
      * parameters the runtime compares at sync steps only; the logged grad \
      * norm is rank 0's, and the verdicts to skip a step are agreed */

/* ---- the tensor and sequence slots (parallel kind, LOOM_SLOT_TENSOR / LOOM_SLOT_SEQUENCE) ---- */

/* Parameter roles, as the model declares them (how a tensor slot may split them). */
typedef enum loom_role {
  LOOM_ROLE_COLUMN = 0,     /* split dim 0: output features of an [out, in] weight, and its bias */
  LOOM_ROLE_ROW = 1,        /* split dim 1: input features */
  LOOM_ROLE_VOCAB = 2,      /* split dim 0 of an embedding table */
  LOOM_ROLE_REPLICATED = 3, /* every rank holds all of it */
  LOOM_ROLE_EXPERT = 4
} loom_role;

/* The part of a global tensor a rank holds. Dimension `dim` is seen as `fused` equal parts (a fused
 * QKV weight is 3 matrices along dim 0); the rank holds rows [begin, begin + length) of each part.
 * length = -1: the whole tensor. */
typedef struct loom_slice {
  int32_t dim;
  int32_t fused;
  int64_t begin;
  int64_t length;
} loom_slice;

/* What the tensor and sequence slots work with: the tp communicator and the kernels. */
typedef struct loom_tensor_context {
  loom_version v;
  const loom_comm_v2* comm;
  void* comm_self;
  loom_comm* tp;
  const loom_ops* ops;
} loom_tensor_context;

/* Megatron-style tensor parallelism. f (entering a column-parallel region) is the identity
 * forward and an all-reduce backward; g (leaving a row-parallel region) is an all-reduce forward
 * and the identity backward; the runtime calls enter_bwd and exit_fwd, the identities need no
 * call. Vocabulary-split embedding and cross-entropy keep full logits off every single rank. */
typedef struct loom_tensor_v2 {
  loom_plugin base;
  loom_cost_fn cost; /* optional */
  loom_status (*setup)(void* self, const loom_tensor_context* ctx, loom_error* err);
  loom_status (*shard)(void* self, int32_t role, int32_t ndim, const int64_t* global_shape,
                       int32_t fused, loom_slice* out, loom_error* err);
  loom_status (*enter_bwd)(void* self, loom_tensor* dh, loom_error* err);
  loom_status (*exit_fwd)(void* self, loom_tensor* y, loom_error* err);
  /* out[N, C] = wte_local[token - vocab_begin] for tokens this rank holds, 0 otherwise: a partial
   * sum the runtime completes with the region exit (all-reduce, or reduce-scatter under sp). */
  loom_status (*embedding_fwd)(void* self, float* out, const int32_t* tokens, int64_t N,
                               const float* wte_local, int64_t vocab_begin, int64_t vocab_local,
                               int64_t C, loom_error* err);
  loom_status (*embedding_bwd)(void* self, float* dwte_local, const float* dout,
                               const int32_t* tokens, int64_t N, int64_t vocab_begin,
                               int64_t vocab_local, int64_t C, loom_error* err);
  /* Cross-entropy over logits split by vocabulary [N, vocab_local]: the row max, the sum of exp
   * and the target logit are all-reduced. Writes dloss * (softmax - onehot) over the local
   * columns in place when dloss != 0; *loss_sum = sum of the rows' losses (same on every rank). */
  loom_status (*cross_entropy)(void* self, float* logits, const int32_t* targets, int64_t N,
                               int64_t vocab_begin, int64_t vocab_local, int64_t vocab_real,
                               float dloss, double* loss_sum, loom_error* err);
} loom_tensor_v2;

/* Megatron sequence parallelism on top of tp: outside the tp regions each rank holds rows
 * [r N / tp, (r + 1) N / tp) of the activations. f becomes all-gather (backward reduce-scatter),
 * g becomes reduce-scatter (backward all-gather). */
typedef struct loom_sequence_v2 {
  loom_plugin base;
  loom_cost_fn cost; /* optional */
  loom_status (*setup)(void* self, const loom_tensor_context* ctx, loom_error* err);
  /* full [N, C] rows from local [N / tp, C] and back; out is allocated by the caller. */
  loom_status (*gather)(void* self, const loom_tensor* local, loom_tensor* full, loom_error* err);
  loom_status (*scatter)(void* self, const loom_tensor* full, loom_tensor* local, loom_error* err);
  /* Sums over tp the gradient of a replicated parameter that saw only a sequence shard. */
  loom_status (*reduce_replicated)(void* self, loom_tensor* grad, loom_error* err);
} loom_sequence_v2;

/* ---- the pipeline slot (parallel kind, LOOM_SLOT_PIPELINE) --------------------------- */

/* p stages (the pp degree), m micro-batches per step, v model chunks per rank. Chunk c of pp rank r
 * is virtual stage c * p + r, so activations go round the ranks v times. */
typedef struct loom_pipeline_shape {
  int32_t stages;
  int32_t microbatches;
  int32_t chunks; /* 0 in configure(): the schedule's default */
} loom_pipeline_shape;

/* FORWARD and BACKWARD since 2.0. WEIGHT (2.1): the weight-gradient half of a backward. When a
 * rank's list holds a WEIGHT for (micro-batch, chunk), that pair's BACKWARD computes only the
 * gradient of its input (what the previous stage waits for) and sets the linear layers'
 * weight-gradient GEMMs aside; the WEIGHT, later on the same rank, runs them. Zero-bubble
 * schedules (Qi et al. 2023) fill the pipeline's idle time with these. */
typedef enum loom_pipe_op {
  LOOM_PIPE_FORWARD = 0,
  LOOM_PIPE_BACKWARD = 1,
  LOOM_PIPE_WEIGHT = 2
} loom_pipe_op;

/* One unit of a rank's step: micro-batch `microbatch` forward or backward through its chunk. */
typedef struct loom_pipe_action {
  int32_t op;
  int32_t microbatch;
  int32_t chunk;
} loom_pipe_action;

/* A pipeline schedule. The runtime runs the actions in order on each pp rank: a forward receives
 * its input from the previous virtual stage (blocking) and sends its output to the next one
 * (without waiting); a backward does the same with gradients in the other direction; a weight
 * action needs only its own backward, earlier on the rank. A schedule must therefore be complete
 * (every micro-batch forward and backward once per chunk, and at most one weight action after
 * each backward) and must finish under those rules; the runtime checks both before the first
 * step. */
typedef struct loom_pipeline_v2 {
  loom_plugin base;
  loom_cost_fn cost; /* optional */
  /* Validates the shape and fills chunks when 0; LOOM_BAD_CONFIG names what does not fit. */
  loom_status (*configure)(void* self, loom_pipeline_shape* shape, loom_error* err);
  /* Splits n_layers layers into stages * chunks contiguous, non-empty virtual stages:
   * stage_of[i] for layer i. kinds[i] is 'E' (embedding), 't' (transformer block) or 'L' (final
   * norm, head and loss); costs[i] its relative compute. layout: "" = balanced by cost, otherwise
   * the user's split, e.g. "E t t | t t t | t t L". */
  loom_status (*partition)(void* self, const loom_pipeline_shape* shape, int32_t n_layers,
                           const char* kinds, const double* costs, const char* layout,
                           int32_t* stage_of, loom_error* err);
  /* pp rank `rank`'s actions for one step, in order: 2 m v, plus a weight action for each split
   * backward (cap = 3 m v). */
  loom_status (*schedule)(void* self, const loom_pipeline_shape* shape, int32_t rank,
                          loom_pipe_action* out, int64_t cap, int64_t* n, loom_error* err);
} loom_pipeline_v2;

/* ---- the expert slot (parallel kind, LOOM_SLOT_EXPERT) ------------------------------ */
/* Expert parallelism: the E experts of every MoE layer are spread over the ep group, and tokens
 * travel to their experts' rank and back (all-to-all). The runtime routes, keeps capacity and
 * permutes rows; the plugin places experts and moves rows. */
typedef struct loom_expert_context {
  loom_version v;
  const loom_comm_v2* comm;
  void* comm_self;
  loom_comm* ep;   /* the expert-parallel group */
  int32_t experts; /* experts per MoE layer, over the whole group */
} loom_expert_context;
typedef struct loom_expert_v2 {
  loom_plugin base;
  loom_cost_fn cost; /* optional */
  /* Places the experts: this rank holds experts [*first, *first + *count), a contiguous range.
   * LOOM_BAD_CONFIG when the experts do not fit the group (e.g. experts % ep != 0). */
  loom_status (*setup)(void* self, const loom_expert_context* ctx, int32_t* first, int32_t* count,
                       loom_error* err);
  /* A collective over ep. sent[e]: rows this rank routes to expert e (E entries). Writes
   * received[s * count + j]: rows ep rank s routes to this rank's local expert j. */
  loom_status (*exchange_counts)(void* self, const int64_t* sent, int64_t* received,
                                 loom_error* err);
  /* A collective over ep. rows [sum(sent), width], grouped by expert in expert order, go to the
   * experts' ranks; out [sum(received), width] is grouped by local expert, then by source rank. */
  loom_status (*dispatch)(void* self, const loom_tensor* rows, const int64_t* sent,
                          const int64_t* received, loom_tensor* out, loom_error* err);
  /* The inverse of dispatch: rows in dispatch's output layout go back to their source ranks,
   * out in the layout dispatch read. Forward returns expert outputs with it; backward sends
   * output gradients with dispatch and brings input gradients back with combine. */
  loom_status (*combine)(void* self, const loom_tensor* rows, const int64_t* sent,
                         const int64_t* received, loom_tensor* out, loom_error* err);
} loom_expert_v2;

/* ---- the context slot (parallel kind, LOOM_SLOT_CONTEXT) ---------------------------- */
/* Context parallelism: the cp ranks of a group hold different positions of the same sequences,
 * and attention, the one layer that mixes positions, runs across them. Everything else in the
 * model is per position and runs locally. The plugin decides which positions each rank holds
 * (split) and how attention reaches the other ranks' keys and values. */
typedef struct loom_context_context {
  loom_version v;
  const loom_comm_v2* comm;
  void* comm_self;
  loom_comm* cp; /* the context-parallel group */
  const loom_ops* ops;
  loom_device device; /* where the activations live (allocate staging buffers there) */
} loom_context_context;

/* Positions [begin, begin + length) of a sequence, held as consecutive local rows. */
typedef struct loom_position_run {
  int64_t begin;
  int64_t length;
} loom_position_run;

/* One attention call over this rank's T local positions of B sequences, in the layouts of the op
 * table's attention_fwd/_bwd: q rows ldq apart, k and v rows ldkv apart, out rows H*D, lse
 * [B, H, T]. Forward writes out and lse (over every rank's keys); backward reads them with dout
 * and writes dq, dk, dv (the gradients of this rank's q, k and v, summed over every rank's
 * queries). */
typedef struct loom_attention_args {
  float* out;
  float* lse;
  const float *q, *k, *v;
  int64_t ldq, ldkv, B, T, H, Hkv, D;
  const float* dout; /* backward only */
  float *dq, *dk, *dv;
} loom_attention_args;

typedef struct loom_context_v2 {
  loom_plugin base;
  loom_cost_fn cost; /* optional */
  loom_status (*setup)(void* self, const loom_context_context* ctx, loom_error* err);
  /* The positions rank `rank` of the cp group holds of a seq_len-token sequence, in local row
   * order: writes *n <= cap ascending runs totalling seq_len / cp. LOOM_BAD_CONFIG, with a
   * message, when seq_len cannot be split that way. */
  loom_status (*split)(void* self, int64_t seq_len, int32_t rank, loom_position_run* runs,
                       int32_t cap, int32_t* n, loom_error* err);
  /* Collectives over cp: every rank calls them in the same order with the same shapes. */
  loom_status (*attention_fwd)(void* self, const loom_attention_args* a, loom_error* err);
  loom_status (*attention_bwd)(void* self, const loom_attention_args* a, loom_error* err);
  /* Since the previous call: ms computing attention, ms waiting on transfers (exposed), and
   * bytes sent. */
  loom_status (*stats)(void* self, double* compute_ms, double* exposed_comm_ms, int64_t* bytes_sent,
                       loom_error* err);
} loom_context_v2;

#endif /* LOOM_PLUGIN_PARALLEL_H */
