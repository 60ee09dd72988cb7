#include "loader/v1_adapter.hpp"

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <variant>
#include <vector>

#include "core/errors.hpp"
#include "loader/descriptor.hpp"
#include "loader/host.hpp"
#include "loader/services.hpp"

namespace loom::plugins {

namespace {

// The self of an adapted instance.
struct Wrapped {
  const v1::plugin* table;
  void* self;
  v1::comm comm{};             // the comm table of the last setup context, in ABI 1's layout
  std::vector<int32_t> roles;  // a rounding-only precision: each site's operand role
};

Wrapped* wrapped(void* s) { return static_cast<Wrapped*>(s); }
template <class V1>
const V1* old_table(void* s) {
  return reinterpret_cast<const V1*>(wrapped(s)->table);
}

// Forward<&v1::comm::barrier>::call(self, args...) unwraps self and calls the ABI 1 entry.
template <auto Field>
struct Forward;
template <class V1, class R, class... A, R (*V1::*Field)(void*, A...)>
struct Forward<Field> {
  static R call(void* s, A... a) { return (old_table<V1>(s)->*Field)(wrapped(s)->self, a...); }
};

// The forwarder when the old table holds the entry (its size covers it and it is set), else NULL.
template <auto Field, class V1>
auto forward_if_set(const V1* t) -> decltype(&Forward<Field>::call) {
  return v1::has(t, Field) && t->*Field ? &Forward<Field>::call : nullptr;
}
#define LOOM_FORWARD(dst, src, field) \
  (dst).field = forward_if_set<&std::remove_cvref_t<decltype(*(src))>::field>(src)

// A comm table of either major in ABI 1's layout, for the contexts of ABI 1 plugins; self stays
// the comm plugin's (an adapted comm's entries unwrap it themselves).
v1::comm downgrade(const loom_comm_v2* t) {
  v1::comm c{};
  c.base.v = {v1::kMajor, v1::kLastMinor, sizeof(v1::comm)};
  c.base.kind = t->base.kind;
  c.base.name = t->base.name;
  c.base.version = t->base.version;
  c.base.summary = t->base.summary;
  c.base.options = t->base.options;
  c.init = t->init, c.split = t->split, c.free_comm = t->free_comm, c.rank = t->rank,
  c.size = t->size;
  c.all_reduce = t->all_reduce, c.reduce_scatter = t->reduce_scatter, c.all_gather = t->all_gather;
  c.broadcast = t->broadcast, c.all_to_all = t->all_to_all, c.send = t->send, c.recv = t->recv;
  c.barrier = t->barrier, c.wait = t->wait;
  return c;
}

// ---- base and lifecycle -----------------------------------------------------------------------

loom_status no_direct_create(const loom_host*, const loom_options*, void**, loom_error* err) {
  return host().set_error(err, LOOM_INTERNAL,
                          "an adapted ABI 1 plugin is created through create_plugin_instance");
}
void no_direct_destroy(void*) {}
loom_status no_direct_validate(const loom_host*, const loom_options*, loom_error* err) {
  return host().set_error(err, LOOM_INTERNAL,
                          "an adapted ABI 1 plugin is validated through validate_plugin_options");
}

template <class T>
T proc(const v1::plugin* d, const char* name) {
  return d->v.minor >= 6 && d->get_proc ? reinterpret_cast<T>(const_cast<void*>(d->get_proc(name)))
                                        : nullptr;
}

loom_plugin adapt_base(const v1::plugin* d, uint32_t size) {
  loom_plugin b{};
  b.v = {d->v.major, d->v.minor, size};  // keeps the ABI it was built for, for logs and manifests
  b.kind = d->kind;
  b.slot = d->slot;
  b.name = d->name;
  b.version = d->version;
  b.summary = d->summary;
  b.options = d->options;
  b.option_rules = proc<const loom_option_rule*>(d, "loom_option_rules_v1");
  b.validate_options =
      proc<v1::validate_fn>(d, "loom_validate_options_v1") ? &no_direct_validate : nullptr;
  b.services = nullptr;  // ABI 1 declared none; its host grants every service
  b.score = nullptr;     // through score_plugin
  b.create = &no_direct_create;
  b.destroy = &no_direct_destroy;
  return b;
}

// 1.7's cost entry took no options: the adapted entry finds the old one through the descriptor.
loom_status v1_cost(const loom_plugin* plugin, const loom_options*, const loom_cost_query* q,
                    loom_cost_collective* out, int64_t cap, int64_t* n, loom_error* err) {
  // 1.7 wrote elements of ABI 2's size (kCostV2Size), with no axis: its what[] ran 4 bytes
  // longer, over where axis lies. They are copied into ABI 3's, axis and every 0.
  std::vector<unsigned char> raw(static_cast<size_t>(out ? cap : 0) * kCostV2Size);
  const loom_status s = proc<v1::cost_fn>(v1_original(plugin), "loom_cost_v1")(
      q, out ? reinterpret_cast<loom_cost_collective*>(raw.data()) : nullptr, cap, n, err);
  if (s == LOOM_OK && out)
    widen_costs(raw.data(), std::min(*n, cap), offsetof(loom_cost_collective, axis), out);
  return s;
}
loom_cost_fn cost_of(const v1::plugin* d) {
  return proc<v1::cost_fn>(d, "loom_cost_v1") ? &v1_cost : nullptr;
}

// A parallel slot's table with its base and the cost entry (1.7) filled.
template <class Table>
Table parallel_table(const v1::plugin* d) {
  Table t{};
  t.base = adapt_base(d, sizeof t);
  t.cost = cost_of(d);
  return t;
}

// ---- kinds
// ----------------------------------------------------------------------------------------

loom_comm_v2 adapt_comm(const v1::comm* s) {
  loom_comm_v2 t{};
  t.base = adapt_base(&s->base, sizeof t);
  LOOM_FORWARD(t, s, init), LOOM_FORWARD(t, s, split), LOOM_FORWARD(t, s, free_comm);
  LOOM_FORWARD(t, s, rank), LOOM_FORWARD(t, s, size), LOOM_FORWARD(t, s, all_reduce);
  LOOM_FORWARD(t, s, reduce_scatter), LOOM_FORWARD(t, s, all_gather), LOOM_FORWARD(t, s, broadcast);
  LOOM_FORWARD(t, s, all_to_all), LOOM_FORWARD(t, s, send), LOOM_FORWARD(t, s, recv);
  LOOM_FORWARD(t, s, barrier), LOOM_FORWARD(t, s, wait);
  return t;
}

loom_ckpt_v2 adapt_ckpt(const v1::ckpt* s) {
  loom_ckpt_v2 t{};
  t.base = adapt_base(&s->base, sizeof t);
  LOOM_FORWARD(t, s, save), LOOM_FORWARD(t, s, finish), LOOM_FORWARD(t, s, poll),
      LOOM_FORWARD(t, s, save_stable);
  if (s->base.v.minor < 6) return t;  // what came in 1.6 was not there before
  t.capabilities = v1::has(s, &v1::ckpt::capabilities) ? s->capabilities : 0;
  LOOM_FORWARD(t, s, open), LOOM_FORWARD(t, s, committed), LOOM_FORWARD(t, s, read),
      LOOM_FORWARD(t, s, list);
  return t;
}

// A precision of ABI 1.0 rounds operands itself: every site's format is LOOM_FORMAT_PLUGIN.
loom_status rounding_add_site(void* s, const char*, int32_t role, int32_t* id, loom_error*) {
  wrapped(s)->roles.push_back(role);
  *id = static_cast<int32_t>(wrapped(s)->roles.size() - 1);
  return LOOM_OK;
}
loom_operand_format rounding_site_format(void*, int32_t) { return {LOOM_FORMAT_PLUGIN, 1.f}; }
loom_status rounding_round_site(void* s, int32_t id, loom_tensor* t, loom_error* err) {
  return old_table<v1::precision>(s)->round_operand(wrapped(s)->self, t, wrapped(s)->roles.at(id),
                                                    err);
}

loom_precision_v2 adapt_precision(const v1::precision* s) {
  loom_precision_v2 t{};
  t.base = adapt_base(&s->base, sizeof t);
  t.compute_dtype = s->compute_dtype;
  t.exact = s->exact;
  if (v1::has(s, &v1::precision::load_state) && s->site_format) {  // the 1.1 format policy
    LOOM_FORWARD(t, s, add_site), LOOM_FORWARD(t, s, site_format), LOOM_FORWARD(t, s, observe);
    LOOM_FORWARD(t, s, loss_scale), LOOM_FORWARD(t, s, step_stats), LOOM_FORWARD(t, s, end_step);
    LOOM_FORWARD(t, s, metrics), LOOM_FORWARD(t, s, save_state), LOOM_FORWARD(t, s, load_state);
  } else if (!s->exact) {
    t.add_site = &rounding_add_site;
    t.site_format = &rounding_site_format;
    t.round_site = &rounding_round_site;
  }
  return t;
}

// An adapted plugin's context carries ABI 2's op table (plugins::ops_for), which ABI 1's extends.
const loom_ops_v2* v2_ops(const loom_ops* ops) { return reinterpret_cast<const loom_ops_v2*>(ops); }

// The data context in ABI 1's layout, its comm table downgraded into the wrapper.
loom_status data_setup(void* s, const loom_data_context* c, loom_error* err) {
  Wrapped* w = wrapped(s);
  w->comm = downgrade(c->comm);
  v1::data_context d{{v1::kMajor, v1::kLastMinor, sizeof d},
                     &w->comm,
                     c->comm_self,
                     c->dp,
                     c->values,
                     c->grads,
                     c->numel,
                     c->params,
                     c->n_params,
                     c->units,
                     c->n_units,
                     c->param_flags,
                     v2_ops(c->ops),
                     c->expert_dp};
  const auto* t = old_table<v1::data>(s);
  const loom_status st = t->setup(w->self, &d, err);
  // Sharding is declared since 1.6; a plugin that shards without saying so cannot run.
  if (st == LOOM_OK && v1::has(t, &v1::data::zero_stage) && t->zero_stage &&
      t->zero_stage(w->self) > 0 &&
      !(v1::has(t, &v1::data::capabilities) && t->base.v.minor >= 6 &&
        (t->capabilities & LOOM_DATA_SHARDED)))
    return host().set_error(err, LOOM_BAD_CONFIG,
                            ("data plugin '" + std::string(t->base.name) + "' reports ZeRO stage " +
                             std::to_string(t->zero_stage(w->self)) +
                             " but does not declare LOOM_DATA_SHARDED (it was built " +
                             "against plugin ABI 1." + std::to_string(t->base.v.minor) + ")")
                                .c_str());
  return st;
}

loom_data_v2 adapt_data_head(const v1::data* s, uint32_t size) {
  loom_data_v2 h{};
  h.base = adapt_base(&s->base, size);
  h.cost = cost_of(&s->base);
  h.setup = &data_setup;
  LOOM_FORWARD(h, s, finish_grads), LOOM_FORWARD(h, s, accounting);
  if (s->base.v.minor < 6) return h;
  h.capabilities = v1::has(s, &v1::data::capabilities) ? s->capabilities : 0;
  LOOM_FORWARD(h, s, save_state), LOOM_FORWARD(h, s, load_state);
  return h;
}

loom_data_replicated_v2 adapt_replicated(const v1::data* s) {
  loom_data_replicated_v2 t{};
  t.data = adapt_data_head(s, sizeof t);
  t.data.capabilities &= ~uint64_t{LOOM_DATA_SHARDED};
  LOOM_FORWARD(t, s, grad_ready);
  return t;
}

loom_data_sharded_v2 adapt_sharded(const v1::data* s) {
  loom_data_sharded_v2 t{};
  t.data = adapt_data_head(s, sizeof t);
  t.stage = forward_if_set<&v1::data::zero_stage>(s);
  LOOM_FORWARD(t, s, acquire_params), LOOM_FORWARD(t, s, release_params),
      LOOM_FORWARD(t, s, grad_buffer);
  LOOM_FORWARD(t, s, unit_grads_ready), LOOM_FORWARD(t, s, sum_squares), LOOM_FORWARD(t, s, step);
  LOOM_FORWARD(t, s, shard_pieces), LOOM_FORWARD(t, s, pieces_loaded);
  return t;
}

v1::tensor_context old_tensor_context(void* s, const loom_tensor_context* c) {
  wrapped(s)->comm = downgrade(c->comm);
  return {{v1::kMajor, v1::kLastMinor, sizeof(v1::tensor_context)},
          &wrapped(s)->comm,
          c->comm_self,
          c->tp,
          v2_ops(c->ops)};
}
loom_status tensor_setup(void* s, const loom_tensor_context* c, loom_error* err) {
  const v1::tensor_context d = old_tensor_context(s, c);
  return old_table<v1::tensor>(s)->setup(wrapped(s)->self, &d, err);
}
loom_status sequence_setup(void* s, const loom_tensor_context* c, loom_error* err) {
  const v1::tensor_context d = old_tensor_context(s, c);
  return old_table<v1::sequence>(s)->setup(wrapped(s)->self, &d, err);
}
loom_status expert_setup(void* s, const loom_expert_context* c, int32_t* first, int32_t* count,
                         loom_error* err) {
  wrapped(s)->comm = downgrade(c->comm);
  const v1::expert_context d{
      {v1::kMajor, v1::kLastMinor, sizeof d}, &wrapped(s)->comm, c->comm_self, c->ep, c->experts};
  return old_table<v1::expert>(s)->setup(wrapped(s)->self, &d, first, count, err);
}
loom_status context_setup(void* s, const loom_context_context* c, loom_error* err) {
  wrapped(s)->comm = downgrade(c->comm);
  const v1::context_context d{{v1::kMajor, v1::kLastMinor, sizeof d},
                              &wrapped(s)->comm,
                              c->comm_self,
                              c->cp,
                              v2_ops(c->ops),
                              c->device};
  return old_table<v1::context>(s)->setup(wrapped(s)->self, &d, err);
}

loom_tensor_v2 adapt_tensor(const v1::tensor* s) {
  auto t = parallel_table<loom_tensor_v2>(&s->base);
  t.setup = &tensor_setup;
  LOOM_FORWARD(t, s, shard), LOOM_FORWARD(t, s, enter_bwd), LOOM_FORWARD(t, s, exit_fwd);
  LOOM_FORWARD(t, s, embedding_fwd), LOOM_FORWARD(t, s, embedding_bwd),
      LOOM_FORWARD(t, s, cross_entropy);
  return t;
}

loom_sequence_v2 adapt_sequence(const v1::sequence* s) {
  auto t = parallel_table<loom_sequence_v2>(&s->base);
  t.setup = &sequence_setup;
  LOOM_FORWARD(t, s, gather), LOOM_FORWARD(t, s, scatter), LOOM_FORWARD(t, s, reduce_replicated);
  return t;
}

loom_pipeline_v2 adapt_pipeline(const v1::pipeline* s) {
  auto t = parallel_table<loom_pipeline_v2>(&s->base);
  LOOM_FORWARD(t, s, configure), LOOM_FORWARD(t, s, partition), LOOM_FORWARD(t, s, schedule);
  return t;
}

loom_expert_v2 adapt_expert(const v1::expert* s) {
  auto t = parallel_table<loom_expert_v2>(&s->base);
  t.setup = &expert_setup;
  LOOM_FORWARD(t, s, exchange_counts), LOOM_FORWARD(t, s, dispatch), LOOM_FORWARD(t, s, combine);
  return t;
}

loom_context_v2 adapt_context(const v1::context* s) {
  auto t = parallel_table<loom_context_v2>(&s->base);
  t.setup = &context_setup;
  LOOM_FORWARD(t, s, split), LOOM_FORWARD(t, s, attention_fwd), LOOM_FORWARD(t, s, attention_bwd);
  LOOM_FORWARD(t, s, stats);
  return t;
}
#undef LOOM_FORWARD

// ---- the adapted tables of this process ---------------------------------------------------------

using Table = std::variant<loom_comm_v2, loom_ckpt_v2, loom_precision_v2, loom_data_replicated_v2,
                           loom_data_sharded_v2, loom_tensor_v2, loom_sequence_v2, loom_pipeline_v2,
                           loom_expert_v2, loom_context_v2>;

struct Adapted {
  std::mutex m;
  std::deque<Table> tables;  // a deque never moves what it holds
  std::map<const v1::plugin*, const loom_plugin*> of_old;
  std::map<const loom_plugin*, const v1::plugin*> old_of;
};
Adapted& adapted() {
  static Adapted a;
  return a;
}

template <class V1>
const V1* as(const v1::plugin* d) {
  return reinterpret_cast<const V1*>(d);
}

Table adapt_table(const v1::plugin* d) {
  switch (d->kind) {
    case LOOM_KIND_COMM:
      return adapt_comm(as<v1::comm>(d));
    case LOOM_KIND_CKPT:
      return adapt_ckpt(as<v1::ckpt>(d));
    case LOOM_KIND_PRECISION:
      return adapt_precision(as<v1::precision>(d));
  }
  switch (d->slot) {
    case LOOM_SLOT_DATA: {
      const auto* t = as<v1::data>(d);
      const bool sharded = d->v.minor >= 6 && v1::has(t, &v1::data::capabilities) &&
                           (t->capabilities & LOOM_DATA_SHARDED);
      if (sharded) return adapt_sharded(t);
      return adapt_replicated(t);
    }
    case LOOM_SLOT_TENSOR:
      return adapt_tensor(as<v1::tensor>(d));
    case LOOM_SLOT_SEQUENCE:
      return adapt_sequence(as<v1::sequence>(d));
    case LOOM_SLOT_PIPELINE:
      return adapt_pipeline(as<v1::pipeline>(d));
    case LOOM_SLOT_EXPERT:
      return adapt_expert(as<v1::expert>(d));
    case LOOM_SLOT_CONTEXT:
      return adapt_context(as<v1::context>(d));
  }
  throw RuntimeError("no ABI 1 table of kind " + std::to_string(d->kind) + ", slot " +
                     std::to_string(d->slot));
}

}  // namespace

const loom_plugin* adapt_v1(const v1::plugin* d, const std::string& library) {
  Adapted& a = adapted();
  std::lock_guard<std::mutex> lock(a.m);
  if (auto it = a.of_old.find(d); it != a.of_old.end()) return it->second;
  check_v1_descriptor(d, library);
  const Table& t = a.tables.emplace_back(adapt_table(d));
  const loom_plugin* view =
      std::visit([](const auto& table) { return reinterpret_cast<const loom_plugin*>(&table); }, t);
  a.of_old[d] = view;
  a.old_of[view] = d;
  return view;
}

const v1::plugin* v1_original(const loom_plugin* desc) {
  if (!desc || desc->v.major != v1::kMajor) return nullptr;
  Adapted& a = adapted();
  std::lock_guard<std::mutex> lock(a.m);
  auto it = a.old_of.find(desc);
  return it == a.old_of.end() ? nullptr : it->second;
}

int32_t score_plugin(const loom_plugin* desc, const char** why_not) {
  if (why_not) *why_not = "";
  if (const v1::plugin* old = v1_original(desc))
    return old->score ? old->score(&v1_host(), why_not) : 1;
  return desc->score ? desc->score(&host_for(desc), why_not) : 1;
}

loom_status create_plugin_instance(const loom_plugin* desc, const loom_options* opts, void** self,
                                   loom_error* err) {
  const v1::plugin* old = v1_original(desc);
  if (!old) {
    declare_services(desc, true);
    return desc->create(&host_for(desc), opts, self, err);
  }
  void* inner = nullptr;
  const loom_status s = old->create(&v1_host(), opts, &inner, err);
  if (s == LOOM_OK) *self = new Wrapped{old, inner};
  return s;
}

void destroy_plugin_instance(const loom_plugin* desc, void* self) {
  if (!self) return;
  const v1::plugin* old = v1_original(desc);
  if (!old) return desc->destroy(self);
  old->destroy(wrapped(self)->self);
  delete wrapped(self);
}

loom_status validate_plugin_options(const loom_plugin* desc, const loom_options* opts,
                                    loom_error* err) {
  if (const v1::plugin* old = v1_original(desc)) {
    const auto validate = proc<v1::validate_fn>(old, "loom_validate_options_v1");
    return validate ? validate(&v1_host(), opts, err) : LOOM_OK;
  }
  return desc->validate_options ? desc->validate_options(&host_for(desc), opts, err) : LOOM_OK;
}

// ---- the host of ABI 1 plugins ------------------------------------------------------------------

namespace {

// loom.plugins for ABI 1 callers: the comm plugin they wrap, in ABI 1's layout.
struct Downgraded {
  std::mutex m;
  std::map<const loom_plugin*, v1::comm> of;  // a map never moves its values
};
Downgraded& downgraded() {
  static Downgraded d;
  return d;
}

loom_status v1_create_wrapped(const char* name, int32_t kind, const v1::plugin** desc, void** self,
                              loom_error* err) {
  if (kind != LOOM_KIND_COMM)
    return host().set_error(
        err, LOOM_BAD_CONFIG,
        "a plugin built against ABI 1 can wrap comm plugins only; rebuild it against ABI 3");
  const auto* plugins = static_cast<const loom_plugins*>(find_service(LOOM_SERVICE_PLUGINS, 0));
  if (!plugins)
    return host().set_error(
        err, LOOM_UNAVAILABLE,
        "loom.plugins: no configuration to create plugins from in this command");
  const loom_plugin* inner = nullptr;
  const loom_status s = plugins->create(name, kind, &inner, self, err);
  if (s != LOOM_OK) return s;
  std::lock_guard<std::mutex> lock(downgraded().m);
  auto it = downgraded()
                .of.try_emplace(inner, downgrade(reinterpret_cast<const loom_comm_v2*>(inner)))
                .first;
  *desc = &it->second.base;
  return LOOM_OK;
}

void v1_release_wrapped(const v1::plugin* desc, void* self) {
  const loom_plugin* inner = nullptr;
  {
    std::lock_guard<std::mutex> lock(downgraded().m);
    for (const auto& [view, table] : downgraded().of)
      if (&table.base == desc) inner = view;
  }
  if (inner) destroy_plugin_instance(inner, self);
}

const void* v1_service(const char* name, uint32_t min_minor) {
  if (!name || min_minor > v1::kLastMinor) return nullptr;
  if (std::strcmp(name, LOOM_SERVICE_PLUGINS) == 0)
    return find_service(name, 0) ? &v1_plugins_service() : nullptr;
  return find_service(name, 0);
}

}  // namespace

const v1::plugins_service& v1_plugins_service() {
  static const v1::plugins_service s{{v1::kMajor, v1::kLastMinor, sizeof(v1::plugins_service)},
                                     &v1_create_wrapped,
                                     &v1_release_wrapped};
  return s;
}

const v1::host& v1_host() {
  static const v1::host h = [] {
    const loom_host& now = host();
    v1::host t{};
    t.v = {v1::kMajor, v1::kLastMinor, sizeof(v1::host)};
    t.runtime_version = now.runtime_version;
    t.log = now.log;
    t.set_error = now.set_error;
    t.opt_i64 = now.opt_i64, t.opt_f64 = now.opt_f64, t.opt_bool = now.opt_bool,
    t.opt_str = now.opt_str;
    t.alloc = now.alloc;
    t.free = now.free;
    t.service = &v1_service;
    t.error_new = now.error_new, t.error_free = now.error_free, t.error_message = now.error_message;
    return t;
  }();
  return h;
}

}  // namespace loom::plugins
