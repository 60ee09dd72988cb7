// Loom plugin SDK: a header-only C++20 layer over <loom/plugin.h> (plugin ABI 3).
//
// A plugin writes a class per strategy, derives it from the base class of its kind, says what it
// is in one `about` aggregate, and lists the classes in LOOM_PLUGIN(...). The macro generates the
// C entry point; the trampolines here turn any exception into a status plus message, so nothing
// C++ ever crosses the boundary.
//
//   struct Tf32 : loom::sdk::RoundingPrecision {
//     static constexpr loom_option_spec kOptions[] = {..., {}};
//     static constexpr loom::sdk::About about{
//         .name = "tf32", .version = "1.0.0", .summary = "...",
//         .options = kOptions};  // and any of the optional members of About below
//     explicit Tf32(const loom::sdk::Context& ctx);
//     void round_operand(loom_tensor& t, loom_operand_role role) override;
//   };
//   LOOM_PLUGIN(loom::sdk::precision_plugin<Tf32>())
//
// Every optional member lives in `about`, so a misspelt member is a compile error and so is a
// hook of the wrong signature. A static validate, score or cost that `about` does not name is an
// error too (it would never be called).
#pragma once

#if !defined(__cplusplus) || __cplusplus < 202002L
#error \
    "<loom/sdk.hpp> is the C++20 layer of the Loom plugin SDK (compile with -std=c++20); C and C++17 plugins include <loom/plugin.h>"
#endif

#include <loom/plugin.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace loom::sdk {

// One entry of a strategy's cost, for About::cost.
inline loom_cost_collective collective(loom_cost_op op, loom_cost_phase phase, int64_t bytes,
                                       int64_t calls, double hidden, const char* what,
                                       int32_t group = 0) {
  loom_cost_collective c{};
  c.group = group;
  c.op = op;
  c.phase = phase;
  c.bytes = bytes;
  c.calls = calls;
  c.hidden = hidden;
  std::strncpy(c.what, what, sizeof(c.what) - 1);
  return c;
}

// The same collective on another mesh axis than the strategy's own (its group is that axis).
inline loom_cost_collective on_axis(loom_cost_collective c, loom_axis axis) {
  c.axis = static_cast<int32_t>(axis) + 1;
  return c;
}

// Throw to report a specific status; any other exception reports LOOM_INTERNAL.
struct Error : std::runtime_error {
  loom_status status;
  Error(loom_status s, const std::string& msg) : std::runtime_error(msg), status(s) {}
};
struct ConfigError : Error {
  explicit ConfigError(const std::string& msg) : Error(LOOM_BAD_CONFIG, msg) {}
};
struct Unavailable : Error {
  explicit Unavailable(const std::string& msg) : Error(LOOM_UNAVAILABLE, msg) {}
};

class Host {
 public:
  Host(const loom_host* h, const char* plugin) : h_(h), plugin_(plugin) {}
  const loom_host* raw() const { return h_; }
  // A service of the runtime (LOOM_SERVICE_*), or nullptr when this runtime or command has none,
  // or when the plugin's About::services does not list it.
  template <class T>
  const T* service(const char* name, uint32_t min_minor = 0) const {
    return h_->service ? static_cast<const T*>(h_->service(plugin_, name, min_minor)) : nullptr;
  }
  // Where this process runs (nullptr outside `loom train`); needs "loom.placement" in services.
  const loom_placement* placement() const {
    return service<loom_placement>(LOOM_SERVICE_PLACEMENT);
  }
  // Where the run is, kept current (nullptr outside `loom train`); needs "loom.step".
  const loom_step_info* step() const { return service<loom_step_info>(LOOM_SERVICE_STEP); }
  // Another section's value by dotted key ("train.steps"); needs "loom.config". Throws
  // ConfigError naming the key when it is unknown, of another type, or the service is absent.
  int64_t config_i64(const char* key) const {
    return config<int64_t>(&loom_config_reader::get_i64, key);
  }
  double config_f64(const char* key) const {
    return config<double>(&loom_config_reader::get_f64, key);
  }
  std::string config_str(const char* key) const {
    return config<const char*>(&loom_config_reader::get_str, key);
  }
  void log(loom_log_level level, const std::string& msg) const {
    h_->log(level, plugin_, msg.c_str());
  }
  void info(const std::string& msg) const { log(LOOM_LOG_INFO, msg); }
  void warn(const std::string& msg) const { log(LOOM_LOG_WARN, msg); }

 private:
  template <class T, class Entry>
  T config(Entry entry, const char* key) const {
    const auto* c = service<loom_config_reader>(LOOM_SERVICE_CONFIG);
    if (!c) throw ConfigError(std::string("reading ") + key + ": no loom.config service here");
    T out{};
    loom_error* e = h_->error_new();
    const loom_status s = (c->*entry)(key, &out, e);
    const std::string why = s == LOOM_OK ? "" : h_->error_message(e);
    h_->error_free(e);
    if (s != LOOM_OK) throw ConfigError(why);
    return out;
  }
  const loom_host* h_;
  const char* plugin_;
};

// Typed access to the plugin's own, already validated option table.
class Options {
 public:
  Options(const loom_host* h, const loom_options* o) : h_(h), o_(o) {}
  int64_t i64(const char* key) const { return read<int64_t>(h_->opt_i64, key); }
  double f64(const char* key) const { return read<double>(h_->opt_f64, key); }
  bool boolean(const char* key) const { return read<int32_t>(h_->opt_bool, key) != 0; }
  std::string str(const char* key) const { return read<const char*>(h_->opt_str, key); }

 private:
  template <class T, class Fn>
  T read(Fn fn, const char* key) const {
    T out{};
    if (fn(o_, key, &out) != LOOM_OK)
      throw ConfigError(std::string("option '") + key + "' is not declared with this type");
    return out;
  }
  const loom_host* h_;
  const loom_options* o_;
};

struct Context {
  Host host;
  Options options;
};

// ---- tensor helpers ----

inline int64_t numel(const loom_tensor& t) {
  int64_t n = 1;
  for (int i = 0; i < t.ndim; ++i) n *= t.shape[i];
  return n;
}

// A contiguous 1-D view of n elements, for passing a buffer to the comm table.
inline loom_tensor flat_tensor(void* data, loom_dtype dtype, int64_t n) {
  loom_tensor t{};
  t.data = data;
  t.dtype = dtype;
  t.ndim = 1;
  t.shape[0] = n;
  t.strides[0] = 1;
  return t;
}

inline size_t element_size(int32_t dtype) {
  switch (dtype) {
    case LOOM_F64:
    case LOOM_I64:
      return 8;
    case LOOM_F32:
    case LOOM_I32:
      return 4;
    case LOOM_BF16:
    case LOOM_F16:
      return 2;
    default:
      return 1;  // fp8, u8
  }
}

// An error sink owned by the plugin, for calling other ABI tables (comm, store) and throwing
// their message: `ErrorBox e(host); if (t->wait(s, w, e.get()) != LOOM_OK) e.raise("wait");`
class ErrorBox {
 public:
  explicit ErrorBox(const loom_host* h) : h_(h), e_(h->error_new()) {}
  ~ErrorBox() { h_->error_free(e_); }
  ErrorBox(const ErrorBox&) = delete;
  ErrorBox& operator=(const ErrorBox&) = delete;
  loom_error* get() { return e_; }
  [[noreturn]] void raise(const std::string& what, loom_status s = LOOM_FATAL) const {
    throw Error(s, what + ": " + h_->error_message(e_));
  }

 private:
  const loom_host* h_;
  loom_error* e_;
};

// ---- wrapping another plugin (the loom.plugins service) ---------------------------------------

// Another plugin this one wraps, created through the loom.plugins service with the options of its
// own [plugins.<name>] table, and released when this object goes. `Table` is its kind's table
// (loom_comm_v2, loom_ckpt_v2, ...). call() runs one of the table's entries, passing this thread's
// error sink as the last argument, and turns a failure into an Error naming the plugin and entry.
// The wrapping plugin lists "loom.plugins" in About::services:
//   Wrapped<loom_comm_v2> inner(ctx.host, "gloo", LOOM_KIND_COMM);
//   inner.call("barrier", &loom_comm_v2::barrier, comm);
template <class Table>
class Wrapped {
 public:
  Wrapped(const Host& host, std::string name, int32_t kind)
      : h_(host.raw()), name_(std::move(name)) {
    plugins_ = host.service<loom_plugins>(LOOM_SERVICE_PLUGINS);
    if (!plugins_)
      throw Unavailable("wrapping '" + name_ +
                        "' needs the loom.plugins service (in `loom train`, with \"loom.plugins\" "
                        "in About::services)");
    const loom_plugin* desc = nullptr;
    if (plugins_->create(name_.c_str(), kind, &desc, &self_, error()) != LOOM_OK)
      throw Error(LOOM_BAD_CONFIG,
                  h_->error_message(error()));  // the service's message names the plugin
    table_ = reinterpret_cast<const Table*>(desc);
  }
  ~Wrapped() { plugins_->release(&table_->base, self_); }
  Wrapped(const Wrapped&) = delete;
  Wrapped& operator=(const Wrapped&) = delete;

  const Table& table() const { return *table_; }
  void* self() const { return self_; }
  const std::string& name() const { return name_; }

  template <class Entry, class... Args>
  void call(const char* what, Entry Table::*entry, Args&&... args) const {
    const loom_status s = (table_->*entry)(self_, std::forward<Args>(args)..., error());
    if (s != LOOM_OK) throw Error(s, name_ + ": " + what + ": " + h_->error_message(error()));
  }

  // For a validate hook: that `name` is a plugin of `kind` this runtime can create, or a
  // ConfigError naming `key`. Without the service (an older runtime, or `loom plugins`) it passes.
  static void check(const Host& host, const std::string& name, int32_t kind,
                    const std::string& key) {
    if (!host.service<loom_plugins>(LOOM_SERVICE_PLUGINS)) return;
    try {
      Wrapped probe(host, name, kind);
    } catch (const Error& e) {
      throw ConfigError(key + " = \"" + name + "\": " + e.what());
    }
  }

 private:
  // One sink per thread (the runtime calls some tables from threads of its own, DDP's overlap);
  // a process has one host, so every wrapper of a thread can share it.
  loom_error* error() const {
    thread_local ErrorBox box(h_);
    return box.get();
  }

  const loom_host* h_;
  std::string name_;
  const loom_plugins* plugins_ = nullptr;
  const Table* table_ = nullptr;
  void* self_ = nullptr;
};

// ---- what a plugin says about itself ---------------------------------------------------------

// Declared once per plugin class as `static constexpr loom::sdk::About about{...}`, with
// designated initializers: name, version and summary are required, the rest optional.
struct About {
  const char* name = nullptr;                      // what a config names: "zero2"
  const char* version = nullptr;                   // the plugin's own version: "1.2.0"
  const char* summary = nullptr;                   // one line for `loom plugins`
  const loom_option_spec* options = nullptr;       // the [plugins.<name>] schema, ended by {}
  const loom_option_rule* option_rules = nullptr;  // ranges, choices, required keys, ended by {}
  // What the rules cannot say: throw ConfigError naming the keys. The Host reaches the services.
  void (*validate)(const Options&, const Host&) = nullptr;
  // > 0: can run here (higher is preferred); 0: cannot, with why_not. Default: 1.
  int (*score)(const Host&, std::string& why_not) = nullptr;
  // Parallel kinds: the step's collectives, for `loom plan`, with the plugin's options as a run
  // would get them.
  std::vector<loom_cost_collective> (*cost)(const loom_cost_query&, const Options&) = nullptr;
  // Data (LOOM_DATA_*), checkpoint (LOOM_CKPT_*) and comm (LOOM_COMM_*) kinds: what the plugin
  // handles or offers.
  uint64_t capabilities = 0;
  // The LOOM_SERVICE_* names the plugin asks its Host for, "|"-separated.
  const char* services = nullptr;
  // Extensions found by name (loom_plugin.get_proc): LOOM_COMM_DEVICES for a comm plugin.
  const void* (*get_proc)(const char* name) = nullptr;
  // Precision kind: the dtype it computes in, and exact = operands pass unchanged (fp32).
  loom_dtype compute_dtype = LOOM_F32;
  bool exact = false;
};

// ---- base classes, one per kind -------------------------------------------------------------

class Plugin {
 public:
  virtual ~Plugin() = default;
};

// State of the plugin's own that training depends on, saved in every checkpoint (per rank) and
// given back when a run resumes on the same layout: derive from it beside the kind's base class
// (a data or precision plugin). Without it the plugin keeps no state and `loom plugins info` says
// so.
class Stateful {
 public:
  virtual ~Stateful() = default;
  virtual std::string save_state() = 0;
  virtual void load_state(const std::string& bytes) = 0;
};

// A precision decides the format and scale of every GEMM operand ("site") while the runtime's op
// table does the cast, so the same plugin drives a CPU emulation or a device's native narrow
// GEMMs. It also owns loss scaling and any per-step scaling state (derive from Stateful to keep
// it in checkpoints). An exact precision (fp32) sets About::exact and overrides nothing.
class PrecisionPlugin : public Plugin {
 public:
  // Names a site once (same order on every rank); returns its id.
  virtual int32_t add_site(const std::string& /*name*/, loom_operand_role /*role*/) {
    return sites_++;
  }
  virtual loom_operand_format site_format(int32_t /*id*/) { return {LOOM_F32, 1.f}; }
  // For a site whose format is LOOM_FORMAT_PLUGIN: round the fp32 copy in place.
  virtual void round_site(int32_t /*id*/, loom_tensor& /*t*/) {
    throw Error(LOOM_INTERNAL,
                "a site's format is LOOM_FORMAT_PLUGIN but round_site is not overridden");
  }
  // What the cast saw: amax of |x| before scaling (NaN/inf when the operand held one).
  virtual void observe(int32_t /*id*/, float /*amax*/, bool /*clipped*/) {}
  virtual double loss_scale() { return 1.0; }
  // Values the runtime reduces in place with MAX across the ranks sharing the sites.
  virtual float* step_stats(int64_t& n) {
    n = 0;
    return nullptr;
  }
  // Returns true when the runtime must skip this step's update.
  virtual bool end_step(bool /*found_inf*/) { return false; }
  virtual void metrics(std::vector<std::pair<const char*, double>>& /*out*/) {}

 private:
  int32_t sites_ = 0;
};

// A precision that rounds each operand itself (a format the op table has no cast for): every
// site is LOOM_FORMAT_PLUGIN and comes back to round_operand with its role.
class RoundingPrecision : public PrecisionPlugin {
 public:
  // Rounds one operand in place. Override one of the two: round_at_site when the rounding
  // depends on the site (`site`: the operand's id, the same on every rank and step, for per-site
  // seeds), round_operand otherwise.
  virtual void round_at_site(loom_tensor& t, loom_operand_role role, int32_t /*site*/) {
    round_operand(t, role);
  }
  virtual void round_operand(loom_tensor&, loom_operand_role) {
    throw Error(LOOM_INTERNAL, "a RoundingPrecision overrides round_operand or round_at_site");
  }
  int32_t add_site(const std::string&, loom_operand_role role) override {
    roles_.push_back(role);
    return static_cast<int32_t>(roles_.size() - 1);
  }
  loom_operand_format site_format(int32_t) override { return {LOOM_FORMAT_PLUGIN, 1.f}; }
  void round_site(int32_t id, loom_tensor& t) override { round_at_site(t, roles_.at(id), id); }

 private:
  std::vector<loom_operand_role> roles_;
};

// A checkpoint writer; About::capabilities = LOOM_CKPT_ASYNC when save() returns before the bytes
// are durable.
class CkptPlugin : public Plugin {
 public:
  // The checkpoint root, this rank and the world, before the first save.
  virtual void open(const std::string& /*root*/, int /*rank*/, int /*world*/) {}
  // The save of `step` is committed and now lives under `dir` (no longer dir.tmp).
  virtual void committed(const std::string& /*dir*/, int64_t /*step*/) {}
  virtual void save(const std::string& dir, const std::string& name, const void* data,
                    size_t bytes) = 0;
  virtual void finish() {}
  // Throws the error of a background write that already failed; never blocks.
  virtual void poll() {}
  // `data` stays valid and unchanged until the next finish(); the default copies like save().
  virtual void save_stable(const std::string& dir, const std::string& name, const void* data,
                           size_t bytes) {
    save(dir, name, data, bytes);
  }
};

// A writer that stores files in a form of its own (compressed, bundled, remote) also reads them
// back, so checkpoints it wrote can be resumed, verified and exported: derive from this instead.
class CkptReader : public CkptPlugin {
 public:
  // The bytes of `name` under `dir` as they were given to save(); throw Error(LOOM_SYSTEM, ...)
  // naming the file when it is not there.
  virtual std::string read(const std::string& dir, const std::string& name) = 0;
  virtual std::vector<std::string> list(const std::string& dir) = 0;
};

// A communication backend. Each operation returns a handle when `async` is true (nullptr when it
// completed in the call); wait() completes and frees it. Throw Error(LOOM_FATAL, ...) for a dead
// or silent peer, naming the operation and the peer.
class CommPlugin : public Plugin {
 public:
  virtual loom_comm* init(const loom_store& store, int rank, int size, int64_t timeout_ms) = 0;
  virtual loom_comm* split(loom_comm* parent, int color, int key) = 0;
  virtual void free_comm(loom_comm* comm) = 0;
  virtual int rank(const loom_comm* comm) = 0;
  virtual int size(const loom_comm* comm) = 0;
  virtual loom_work* all_reduce(loom_comm* c, loom_tensor& buf, loom_reduce_op op, bool async) = 0;
  virtual loom_work* reduce_scatter(loom_comm* c, const loom_tensor& in, loom_tensor& out,
                                    loom_reduce_op op, bool async) = 0;
  virtual loom_work* all_gather(loom_comm* c, const loom_tensor& in, loom_tensor& out,
                                bool async) = 0;
  virtual loom_work* broadcast(loom_comm* c, loom_tensor& buf, int root, bool async) = 0;
  virtual loom_work* all_to_all(loom_comm* c, const loom_tensor& in, loom_tensor& out,
                                const int64_t* send_counts, const int64_t* recv_counts,
                                bool async) = 0;
  virtual loom_work* send(loom_comm* c, const loom_tensor& buf, int peer, int tag, bool async) = 0;
  virtual loom_work* recv(loom_comm* c, loom_tensor& buf, int peer, int tag, bool async) = 0;
  virtual void barrier(loom_comm* c) = 0;
  virtual void wait(loom_work* work) = 0;
  // The sends and receives between the two start together (loom_comm_v2.group_start); a
  // backend whose operations never hold each other up leaves them as they are.
  virtual void group_start(loom_comm*) {}
  virtual void group_end(loom_comm*) {}
};

// A data-parallel strategy whose model state stays replicated in the runtime's buffers (DDP):
// it reduces the gradients. About::capabilities says what it handles (LOOM_DATA_EXPERTS,
// LOOM_DATA_PIPELINE); the runtime refuses ep > 1 or pp > 1 for a plugin that did not declare it.
class ReplicatedDataPlugin : public Plugin {
 public:
  virtual void setup(const loom_data_context& ctx) = 0;
  virtual void grad_ready(int64_t param) = 0;
  virtual void finish_grads(double& comm_ms, double& exposed_comm_ms) = 0;
  // Bytes held (params, grads, optimizer states: 0 here; comm buffers) and sent last step.
  virtual void accounting(int64_t out[5]) { std::fill(out, out + 5, 0); }
  // The step's hooks (LOOM_DATA_HOOKS): before its first forward; after the update, taken or
  // skipped, with the runtime's AdamW moments, which the plugin may rewrite as it may the
  // parameters (loom_data_context.values); and, for a plugin that declares LOOM_DATA_DIVERGES,
  // whether the replicas are equal after `step` (the runtime compares them then).
  virtual void before_forward(const loom_step_info& /*step*/) {}
  virtual void after_update(const loom_step_info& /*step*/, bool /*updated*/,
                            const loom_optimizer_state& /*moments*/) {}
  virtual bool replicas_synced(int64_t /*step*/) { return true; }
};

// A data-parallel strategy that owns and shards parameters, gradients and optimizer states
// (ZeRO); the table declares LOOM_DATA_SHARDED for it. See loom_data_sharded_v2.
class ShardedDataPlugin : public Plugin {
 public:
  virtual void setup(const loom_data_context& ctx) = 0;
  virtual void finish_grads(double& comm_ms, double& exposed_comm_ms) = 0;
  virtual void accounting(int64_t out[5]) = 0;
  virtual int stage() = 0;  // 1, 2 or 3
  virtual float* acquire_params(int64_t unit, bool backward, bool prefetch) = 0;
  virtual void release_params(int64_t unit) = 0;
  virtual float* grad_buffer(int64_t unit) = 0;
  virtual void unit_grads_ready(int64_t unit, bool last) = 0;
  virtual void sum_squares(int which, double out[2]) = 0;
  virtual void step(const loom_adamw& hp) = 0;
  virtual std::vector<loom_shard_piece> shard_pieces() = 0;
  virtual void pieces_loaded() = 0;
};

// SDK 1's data base class. SDK 2 split it by where the model state lives, so a source written
// for ABI 1 stops at its base clause with this message, before the errors its overrides cause.
namespace removed {
template <bool Ported = false>
struct DataPlugin {
  static_assert(Ported,
                "loom::sdk::DataPlugin is SDK 1's (plugin ABI 1): derive from "
                "loom::sdk::ReplicatedDataPlugin (the runtime holds the model, the plugin reduces "
                "gradients) or loom::sdk::ShardedDataPlugin (the plugin shards model state, ZeRO); "
                "docs/plugins.md, 'Porting a source from ABI 1'");
};
}  // namespace removed
using DataPlugin = removed::DataPlugin<>;

// Tensor parallelism (the tensor slot).
class TensorPlugin : public Plugin {
 public:
  virtual void setup(const loom_tensor_context& ctx) = 0;
  virtual loom_slice shard(loom_role role, int ndim, const int64_t* global_shape, int fused) = 0;
  virtual void enter_bwd(loom_tensor& dh) = 0;
  virtual void exit_fwd(loom_tensor& y) = 0;
  virtual void embedding_fwd(float* out, const int32_t* tokens, int64_t N, const float* wte,
                             int64_t vocab_begin, int64_t vocab_local, int64_t C) = 0;
  virtual void embedding_bwd(float* dwte, const float* dout, const int32_t* tokens, int64_t N,
                             int64_t vocab_begin, int64_t vocab_local, int64_t C) = 0;
  virtual double cross_entropy(float* logits, const int32_t* targets, int64_t N,
                               int64_t vocab_begin, int64_t vocab_local, int64_t vocab_real,
                               float dloss) = 0;
};

// A pipeline schedule (the pipeline slot): the layer split and each rank's action order.
class PipelinePlugin : public Plugin {
 public:
  // Throw ConfigError when the shape does not fit the schedule; set chunks when it is 0.
  virtual void configure(loom_pipeline_shape& shape) = 0;
  virtual std::vector<int32_t> partition(const loom_pipeline_shape& shape, const std::string& kinds,
                                         const std::vector<double>& costs,
                                         const std::string& layout) = 0;
  virtual std::vector<loom_pipe_action> schedule(const loom_pipeline_shape& shape, int rank) = 0;
};

// Sequence parallelism (the sequence slot).
class SequencePlugin : public Plugin {
 public:
  virtual void setup(const loom_tensor_context& ctx) = 0;
  virtual void gather(const loom_tensor& local, loom_tensor& full) = 0;
  virtual void scatter(const loom_tensor& full, loom_tensor& local) = 0;
  virtual void reduce_replicated(loom_tensor& grad) = 0;
};

// Expert parallelism (the expert slot): where experts live and how rows reach them.
class ExpertPlugin : public Plugin {
 public:
  // This rank's experts [first, first + count); throw ConfigError when they do not fit.
  virtual void setup(const loom_expert_context& ctx, int32_t& first, int32_t& count) = 0;
  virtual void exchange_counts(const int64_t* sent, int64_t* received) = 0;
  virtual void dispatch(const loom_tensor& rows, const int64_t* sent, const int64_t* received,
                        loom_tensor& out) = 0;
  virtual void combine(const loom_tensor& rows, const int64_t* sent, const int64_t* received,
                       loom_tensor& out) = 0;
};

// Context parallelism (the context slot): which positions a rank holds, and attention
// across the cp group.
class ContextPlugin : public Plugin {
 public:
  virtual void setup(const loom_context_context& ctx) = 0;
  // Rank `rank`'s positions of a seq_len-token sequence; throw ConfigError when it cannot split.
  virtual std::vector<loom_position_run> split(int64_t seq_len, int rank) = 0;
  virtual void attention_fwd(const loom_attention_args& a) = 0;
  virtual void attention_bwd(const loom_attention_args& a) = 0;
  virtual void stats(double& compute_ms, double& exposed_comm_ms, int64_t& bytes_sent) {
    compute_ms = exposed_comm_ms = 0, bytes_sent = 0;
  }
};

}  // namespace loom::sdk

// The op table's typed arguments and device buffers, then the C tables behind the base classes:
// kind_plugin<Impl>() descriptor helpers.
#define LOOM_SDK_TABLES_FROM_SDK
#include <loom/sdk_ops.hpp>
#include <loom/sdk_tables.hpp>
#include <loom/sdk_tables_parallel.hpp>
#undef LOOM_SDK_TABLES_FROM_SDK

// Generates loom_plugin_entry_v3 returning the listed descriptors.
#define LOOM_PLUGIN(...)                                                                       \
  extern "C" LOOM_EXPORT loom_status loom_plugin_entry_v3(                                     \
      const loom_host* host, const loom_plugin* const** out, size_t* count, loom_error* err) { \
    ::loom::sdk::detail::host() = host;                                                        \
    return ::loom::sdk::detail::guarded(err, [&] {                                             \
      static const loom_plugin* const list[] = {__VA_ARGS__};                                  \
      *out = list;                                                                             \
      *count = sizeof(list) / sizeof(list[0]);                                                 \
    });                                                                                        \
  }
