// The descriptor helpers of the Loom plugin SDK: each builds, once, the C table of one kind for a
// class deriving from that kind's base class in <loom/sdk.hpp>, with trampolines that turn any
// exception into a status and a message. Included by <loom/sdk.hpp>; include that instead.
#pragma once

#ifndef LOOM_SDK_TABLES_FROM_SDK
#error "loom/sdk_tables.hpp is part of <loom/sdk.hpp>: include <loom/sdk.hpp> instead"
#endif

namespace loom::sdk {

// ---- trampolines ----------------------------------------------------------------------------

namespace detail {

inline const loom_host*& host() {
  static const loom_host* h = nullptr;
  return h;
}

template <class F>
loom_status guarded(loom_error* err, F&& f) noexcept {
  const loom_host* h = host();
  try {
    f();
    return LOOM_OK;
  } catch (const Error& e) {
    return h ? h->set_error(err, e.status, e.what()) : e.status;
  } catch (const std::exception& e) {
    return h ? h->set_error(err, LOOM_INTERNAL, e.what()) : LOOM_INTERNAL;
  } catch (...) {
    return h ? h->set_error(err, LOOM_INTERNAL, "unknown exception") : LOOM_INTERNAL;
  }
}

// The checks `about` gets: the required strings, hooks it does not wire, and members that mean
// nothing for the kind.
template <class Impl>
consteval bool check_about(loom_kind kind) {
  static_assert(
      requires { Impl::about; },
      "declare `static constexpr loom::sdk::About about{...}` in the plugin class");
  static_assert(std::is_same_v<std::remove_cv_t<decltype(Impl::about)>, About>,
                "`about` must be a loom::sdk::About");
  constexpr const About& a = Impl::about;
  static_assert(a.name && a.version && a.summary, "About needs .name, .version and .summary");
  if constexpr (requires { &Impl::validate; })
    static_assert(a.validate, "the class has a static validate: name it in About::validate");
  if constexpr (requires { &Impl::score; })
    static_assert(a.score, "the class has a static score: name it in About::score");
  if constexpr (requires { &Impl::cost; })
    static_assert(a.cost, "the class has a static cost: name it in About::cost");
  // What SDK 1 found by name is read from `about` alone now: a leftover would silently do nothing.
  static_assert(
      !requires { Impl::options(); } && !requires { Impl::option_rules(); },
      "options() and option_rules() are not read: give the arrays to About::options and "
      "About::option_rules");
  static_assert(
      !requires { Impl::name; } && !requires { Impl::version; } && !requires { Impl::summary; },
      "name, version and summary are not read: set them in About");
  static_assert(
      !requires { Impl::capabilities; } && !requires { Impl::compute_dtype; } &&
          !requires { Impl::exact; },
      "capabilities, compute_dtype and exact are not read: set them in About");
  if (kind != LOOM_KIND_PARALLEL && a.cost)
    throw "About::cost is for parallel plugins";  // consteval: a compile error
  if (kind != LOOM_KIND_PRECISION && (a.exact || a.compute_dtype != LOOM_F32))
    throw "About::exact and compute_dtype are for precision plugins";
  if (kind == LOOM_KIND_PRECISION && a.capabilities)
    throw "About::capabilities is for data, checkpoint and comm plugins";
  if (kind == LOOM_KIND_COMM && (a.capabilities & ~LOOM_COMM_P2P))
    throw "a comm plugin's About::capabilities takes LOOM_COMM_* flags only";
  return true;
}

template <class Impl>
int32_t score(const loom_host* h, const char** why_not) {
  static thread_local std::string reason;
  reason.clear();
  int32_t s = 0;
  try {
    s = Impl::about.score(Host(h, Impl::about.name), reason);
  } catch (const std::exception& e) {
    reason = e.what();
  }
  if (why_not) *why_not = reason.c_str();
  return s;
}

template <class Impl>
loom_status create(const loom_host* h, const loom_options* o, void** self, loom_error* err) {
  return guarded(err, [&] { *self = new Impl(Context{Host(h, Impl::about.name), Options(h, o)}); });
}

template <class Impl>
void destroy(void* self) {
  delete static_cast<Impl*>(self);
}

template <class Impl>
loom_status validate_options(const loom_host* h, const loom_options* o, loom_error* err) {
  return guarded(err, [&] { Impl::about.validate(Options(h, o), Host(h, Impl::about.name)); });
}

template <class Impl>
loom_status cost_entry(const loom_plugin*, const loom_options* opts, const loom_cost_query* q,
                       loom_cost_collective* out, int64_t cap, int64_t* n, loom_error* err) {
  return guarded(err, [&] {
    const std::vector<loom_cost_collective> all = Impl::about.cost(*q, Options(host(), opts));
    *n = static_cast<int64_t>(all.size());
    if (out && *n <= cap) std::copy(all.begin(), all.end(), out);
  });
}

template <class Impl>
constexpr loom_cost_fn cost_of() {
  return Impl::about.cost ? &cost_entry<Impl> : nullptr;
}

template <class Impl>
loom_plugin base(loom_kind kind, loom_slot slot, uint32_t size) {
  constexpr const About& a = Impl::about;
  loom_plugin b{};
  b.v = {LOOM_ABI_MAJOR, LOOM_ABI_MINOR, size};
  b.kind = kind;
  b.slot = slot;
  b.name = a.name;
  b.version = a.version;
  b.summary = a.summary;
  b.options = a.options;
  b.option_rules = a.option_rules;
  b.validate_options = a.validate ? &validate_options<Impl> : nullptr;
  b.services = a.services;
  b.get_proc = a.get_proc;
  b.score = a.score ? &score<Impl> : nullptr;
  b.create = &create<Impl>;
  b.destroy = &destroy<Impl>;
  return b;
}

template <class Impl>
Impl* self_of(void* self) {
  return static_cast<Impl*>(self);
}

// save_state/load_state for a Stateful plugin (data and precision tables share the signatures).
template <class Impl, class Table>
void fill_state(Table& t) {
  if constexpr (std::is_base_of_v<Stateful, Impl>) {
    t.save_state = [](void* self, void* buf, size_t cap, size_t* bytes, loom_error* err) {
      return guarded(err, [&] {
        const std::string s = static_cast<Stateful*>(self_of<Impl>(self))->save_state();
        *bytes = s.size();
        if (!buf) return;
        if (cap < s.size()) throw Error(LOOM_INTERNAL, "save_state: buffer too small");
        std::memcpy(buf, s.data(), s.size());
      });
    };
    t.load_state = [](void* self, const void* buf, size_t bytes, loom_error* err) {
      return guarded(err, [&] {
        static_cast<Stateful*>(self_of<Impl>(self))
            ->load_state(std::string(static_cast<const char*>(buf), bytes));
      });
    };
  }
}

template <class Impl>
PrecisionPlugin* policy(void* self) {
  return static_cast<PrecisionPlugin*>(self_of<Impl>(self));
}

}  // namespace detail

template <class Impl>
const loom_plugin* precision_plugin() {
  static_assert(std::is_base_of_v<PrecisionPlugin, Impl>,
                "a precision plugin derives from loom::sdk::PrecisionPlugin");
  static_assert(detail::check_about<Impl>(LOOM_KIND_PRECISION));
  static const loom_precision_v2 table = [] {
    using detail::guarded, detail::policy;
    loom_precision_v2 t{};
    t.base = detail::base<Impl>(LOOM_KIND_PRECISION, LOOM_SLOT_NONE, sizeof(loom_precision_v2));
    t.compute_dtype = Impl::about.compute_dtype;
    t.exact = Impl::about.exact ? 1 : 0;
    if (t.exact) return t;
    t.add_site = [](void* self, const char* name, int32_t role, int32_t* id, loom_error* err) {
      return guarded(err, [&] {
        *id = policy<Impl>(self)->add_site(name, static_cast<loom_operand_role>(role));
      });
    };
    t.site_format = [](void* self, int32_t id) { return policy<Impl>(self)->site_format(id); };
    t.round_site = [](void* self, int32_t id, loom_tensor* x, loom_error* err) {
      return guarded(err, [&] { policy<Impl>(self)->round_site(id, *x); });
    };
    // Only a policy that overrides observe gets the calls: without one, the device skips
    // measuring amax over every operand. A policy whose observe the SDK cannot name (private,
    // overloaded) counts as overriding it.
    constexpr bool inherited = requires {
      requires std::is_same_v<decltype(&Impl::observe), decltype(&PrecisionPlugin::observe)>;
    };
    if constexpr (!inherited)
      t.observe = [](void* self, int32_t id, float amax, int32_t clipped) {
        policy<Impl>(self)->observe(id, amax, clipped != 0);
      };
    t.loss_scale = [](void* self) { return policy<Impl>(self)->loss_scale(); };
    t.step_stats = [](void* self, float** data, int64_t* n, loom_error* err) {
      return guarded(err, [&] { *data = policy<Impl>(self)->step_stats(*n); });
    };
    t.end_step = [](void* self, int32_t found_inf, int32_t* skip, loom_error* err) {
      return guarded(err, [&] { *skip = policy<Impl>(self)->end_step(found_inf != 0) ? 1 : 0; });
    };
    t.metrics = [](void* self, const char** names, double* values, int32_t cap) {
      std::vector<std::pair<const char*, double>> out;
      policy<Impl>(self)->metrics(out);
      int32_t n = 0;
      for (; n < cap && n < static_cast<int32_t>(out.size()); ++n)
        names[n] = out[n].first, values[n] = out[n].second;
      return n;
    };
    detail::fill_state<Impl>(t);
    return t;
  }();
  return &table.base;
}

template <class Impl>
const loom_plugin* ckpt_plugin() {
  static_assert(std::is_base_of_v<CkptPlugin, Impl>,
                "a checkpoint plugin derives from loom::sdk::CkptPlugin");
  static_assert(detail::check_about<Impl>(LOOM_KIND_CKPT));
  static const loom_ckpt_v2 table = [] {
    loom_ckpt_v2 t{};
    t.base = detail::base<Impl>(LOOM_KIND_CKPT, LOOM_SLOT_NONE, sizeof(loom_ckpt_v2));
    t.save = [](void* self, const char* dir, const char* name, const void* data, size_t bytes,
                loom_error* err) {
      return detail::guarded(err, [&] { static_cast<Impl*>(self)->save(dir, name, data, bytes); });
    };
    t.finish = [](void* self, loom_error* err) {
      return detail::guarded(err, [&] { static_cast<Impl*>(self)->finish(); });
    };
    t.poll = [](void* self, loom_error* err) {
      return detail::guarded(err, [&] { static_cast<Impl*>(self)->poll(); });
    };
    t.save_stable = [](void* self, const char* dir, const char* name, const void* data,
                       size_t bytes, loom_error* err) {
      return detail::guarded(
          err, [&] { static_cast<Impl*>(self)->save_stable(dir, name, data, bytes); });
    };
    t.capabilities = Impl::about.capabilities;
    t.open = [](void* self, const char* root, int32_t rank, int32_t world, loom_error* err) {
      return detail::guarded(err, [&] { static_cast<Impl*>(self)->open(root, rank, world); });
    };
    t.committed = [](void* self, const char* dir, int64_t step, loom_error* err) {
      return detail::guarded(err, [&] { static_cast<Impl*>(self)->committed(dir, step); });
    };
    if constexpr (std::is_base_of_v<CkptReader, Impl>) {
      t.read = [](void* self, const char* dir, const char* name, void* buf, size_t cap,
                  size_t* bytes, loom_error* err) {
        return detail::guarded(err, [&] {
          const std::string data = static_cast<Impl*>(self)->read(dir, name);
          *bytes = data.size();
          if (buf) std::memcpy(buf, data.data(), std::min(cap, data.size()));
        });
      };
      t.list = [](void* self, const char* dir, char* buf, size_t cap, size_t* bytes,
                  loom_error* err) {
        return detail::guarded(err, [&] {
          std::string text;
          for (const std::string& n : static_cast<Impl*>(self)->list(dir)) text += n + "\n";
          *bytes = text.size();
          if (buf) std::memcpy(buf, text.data(), std::min(cap, text.size()));
        });
      };
    }
    return t;
  }();
  return &table.base;
}

namespace detail {
// A comm table's send and recv, and the group entries around them (ABI 2.4).
template <class Impl>
void point_to_point(loom_comm_v2& t) {
  t.send = [](void* self, loom_comm* c, const loom_tensor* b, int32_t peer, int32_t tag,
              loom_work** w, loom_error* e) {
    return detail::guarded(e, [&] {
      loom_work* h = static_cast<Impl*>(self)->send(c, *b, peer, tag, w != nullptr);
      if (w) *w = h;
    });
  };
  t.recv = [](void* self, loom_comm* c, loom_tensor* b, int32_t peer, int32_t tag, loom_work** w,
              loom_error* e) {
    return detail::guarded(e, [&] {
      loom_work* h = static_cast<Impl*>(self)->recv(c, *b, peer, tag, w != nullptr);
      if (w) *w = h;
    });
  };
  t.group_start = [](void* self, loom_comm* c, loom_error* e) {
    return detail::guarded(e, [&] { static_cast<Impl*>(self)->group_start(c); });
  };
  t.group_end = [](void* self, loom_comm* c, loom_error* e) {
    return detail::guarded(e, [&] { static_cast<Impl*>(self)->group_end(c); });
  };
}
}  // namespace detail

template <class Impl>
const loom_plugin* comm_plugin() {
  static_assert(std::is_base_of_v<CommPlugin, Impl>,
                "a comm plugin derives from loom::sdk::CommPlugin");
  static_assert(detail::check_about<Impl>(LOOM_KIND_COMM));
  static const loom_comm_v2 table = [] {
    loom_comm_v2 t{};
    t.base = detail::base<Impl>(LOOM_KIND_COMM, LOOM_SLOT_NONE, sizeof(loom_comm_v2));
    t.init = [](void* self, const loom_store* st, int32_t r, int32_t n, int64_t ms, loom_comm** c,
                loom_error* e) {
      return detail::guarded(e, [&] { *c = static_cast<Impl*>(self)->init(*st, r, n, ms); });
    };
    t.split = [](void* self, loom_comm* p, int32_t color, int32_t key, loom_comm** c,
                 loom_error* e) {
      return detail::guarded(e, [&] { *c = static_cast<Impl*>(self)->split(p, color, key); });
    };
    t.free_comm = [](void* self, loom_comm* c) { static_cast<Impl*>(self)->free_comm(c); };
    t.rank = [](void* self, const loom_comm* c) {
      return static_cast<int32_t>(static_cast<Impl*>(self)->rank(c));
    };
    t.size = [](void* self, const loom_comm* c) {
      return static_cast<int32_t>(static_cast<Impl*>(self)->size(c));
    };
    t.all_reduce = [](void* self, loom_comm* c, loom_tensor* b, int32_t o, loom_work** w,
                      loom_error* e) {
      return detail::guarded(e, [&] {
        loom_work* h = static_cast<Impl*>(self)->all_reduce(c, *b, static_cast<loom_reduce_op>(o),
                                                            w != nullptr);
        if (w) *w = h;
      });
    };
    t.reduce_scatter = [](void* self, loom_comm* c, const loom_tensor* in, loom_tensor* o,
                          int32_t r, loom_work** w, loom_error* e) {
      return detail::guarded(e, [&] {
        loom_work* h = static_cast<Impl*>(self)->reduce_scatter(
            c, *in, *o, static_cast<loom_reduce_op>(r), w != nullptr);
        if (w) *w = h;
      });
    };
    t.all_gather = [](void* self, loom_comm* c, const loom_tensor* in, loom_tensor* o,
                      loom_work** w, loom_error* e) {
      return detail::guarded(e, [&] {
        loom_work* h = static_cast<Impl*>(self)->all_gather(c, *in, *o, w != nullptr);
        if (w) *w = h;
      });
    };
    t.broadcast = [](void* self, loom_comm* c, loom_tensor* b, int32_t root, loom_work** w,
                     loom_error* e) {
      return detail::guarded(e, [&] {
        loom_work* h = static_cast<Impl*>(self)->broadcast(c, *b, root, w != nullptr);
        if (w) *w = h;
      });
    };
    t.all_to_all = [](void* self, loom_comm* c, const loom_tensor* in, loom_tensor* o,
                      const int64_t* sc, const int64_t* rc, loom_work** w, loom_error* e) {
      return detail::guarded(e, [&] {
        loom_work* h = static_cast<Impl*>(self)->all_to_all(c, *in, *o, sc, rc, w != nullptr);
        if (w) *w = h;
      });
    };
    detail::point_to_point<Impl>(t);
    t.barrier = [](void* self, loom_comm* c, loom_error* e) {
      return detail::guarded(e, [&] { static_cast<Impl*>(self)->barrier(c); });
    };
    t.wait = [](void* self, loom_work* w, loom_error* e) {
      return detail::guarded(e, [&] { static_cast<Impl*>(self)->wait(w); });
    };
    t.capabilities = Impl::about.capabilities;
    return t;
  }();
  return &table.base;
}

namespace detail {

// The head both data kinds share.
template <class Impl, class Table>
void fill_data_head(loom_data_v2& h, uint64_t capabilities) {
  h.base = base<Impl>(LOOM_KIND_PARALLEL, LOOM_SLOT_DATA, sizeof(Table));
  h.capabilities = capabilities;
  h.cost = cost_of<Impl>();
  h.setup = [](void* self, const loom_data_context* c, loom_error* e) {
    return guarded(e, [&] { self_of<Impl>(self)->setup(*c); });
  };
  h.finish_grads = [](void* self, double* comm_ms, double* exposed, loom_error* e) {
    return guarded(e, [&] { self_of<Impl>(self)->finish_grads(*comm_ms, *exposed); });
  };
  h.accounting = [](void* self, int64_t* out, loom_error* e) {
    return guarded(e, [&] { self_of<Impl>(self)->accounting(out); });
  };
  fill_state<Impl>(h);
}

// A replicated plugin's get_proc: its LOOM_DATA_HOOKS, then About::get_proc's extensions.
template <class Impl>
const void* replicated_proc(const char* name) {
  static const loom_data_hooks hooks = [] {
    loom_data_hooks h{};
    h.v = {LOOM_ABI_MAJOR, LOOM_ABI_MINOR, sizeof h};
    h.before_forward = [](void* self, const loom_step_info* s, loom_error* e) {
      return guarded(e, [&] { self_of<Impl>(self)->before_forward(*s); });
    };
    h.after_update = [](void* self, const loom_step_info* s, int32_t updated,
                        const loom_optimizer_state* o, loom_error* e) {
      return guarded(e, [&] { self_of<Impl>(self)->after_update(*s, updated != 0, *o); });
    };
    h.replicas_synced = [](void* self, int64_t step) -> int32_t {
      try {
        return self_of<Impl>(self)->replicas_synced(step) ? 1 : 0;
      } catch (...) {
        return 1;  // compared, so a plugin that cannot say is checked rather than trusted
      }
    };
    return h;
  }();
  if (name && std::strcmp(name, LOOM_DATA_HOOKS) == 0) return &hooks;
  return Impl::about.get_proc ? Impl::about.get_proc(name) : nullptr;
}

template <class Impl>
const loom_plugin* replicated_data_plugin() {
  static const loom_data_replicated_v2 table = [] {
    loom_data_replicated_v2 t{};
    fill_data_head<Impl, loom_data_replicated_v2>(t.data, Impl::about.capabilities);
    t.data.base.get_proc = &replicated_proc<Impl>;
    t.grad_ready = [](void* self, int64_t p, loom_error* e) {
      return guarded(e, [&] { self_of<Impl>(self)->grad_ready(p); });
    };
    return t;
  }();
  return &table.data.base;
}

template <class Impl>
const loom_plugin* sharded_data_plugin() {
  static const loom_data_sharded_v2 table = [] {
    loom_data_sharded_v2 t{};
    fill_data_head<Impl, loom_data_sharded_v2>(t.data,
                                               Impl::about.capabilities | LOOM_DATA_SHARDED);
    t.stage = [](void* self) { return static_cast<int32_t>(self_of<Impl>(self)->stage()); };
    t.acquire_params = [](void* self, int64_t u, int32_t flags, float** values, loom_error* e) {
      return guarded(e, [&] {
        *values = self_of<Impl>(self)->acquire_params(u, (flags & LOOM_ACQUIRE_BACKWARD) != 0,
                                                      (flags & LOOM_ACQUIRE_PREFETCH) != 0);
      });
    };
    t.release_params = [](void* self, int64_t u, loom_error* e) {
      return guarded(e, [&] { self_of<Impl>(self)->release_params(u); });
    };
    t.grad_buffer = [](void* self, int64_t u, float** grads, loom_error* e) {
      return guarded(e, [&] { *grads = self_of<Impl>(self)->grad_buffer(u); });
    };
    t.unit_grads_ready = [](void* self, int64_t u, int32_t last, loom_error* e) {
      return guarded(e, [&] { self_of<Impl>(self)->unit_grads_ready(u, last != 0); });
    };
    t.sum_squares = [](void* self, int32_t which, double* out, loom_error* e) {
      return guarded(e, [&] { self_of<Impl>(self)->sum_squares(which, out); });
    };
    t.step = [](void* self, const loom_adamw* hp, loom_error* e) {
      return guarded(e, [&] { self_of<Impl>(self)->step(*hp); });
    };
    t.shard_pieces = [](void* self, loom_shard_piece* out, int64_t cap, int64_t* n, loom_error* e) {
      return guarded(e, [&] {
        auto pieces = self_of<Impl>(self)->shard_pieces();
        *n = static_cast<int64_t>(pieces.size());
        if (out && *n <= cap) std::copy(pieces.begin(), pieces.end(), out);
      });
    };
    t.pieces_loaded = [](void* self, loom_error* e) {
      return guarded(e, [&] { self_of<Impl>(self)->pieces_loaded(); });
    };
    return t;
  }();
  return &table.data.base;
}

}  // namespace detail

// The data slot's table of the kind Impl derives from: ReplicatedDataPlugin or ShardedDataPlugin.
template <class Impl>
const loom_plugin* data_plugin() {
  static_assert(detail::check_about<Impl>(LOOM_KIND_PARALLEL));
  static_assert(
      std::is_base_of_v<ReplicatedDataPlugin, Impl> != std::is_base_of_v<ShardedDataPlugin, Impl>,
      "a data plugin derives from exactly one of loom::sdk::ReplicatedDataPlugin and "
      "ShardedDataPlugin");
  if constexpr (std::is_base_of_v<ShardedDataPlugin, Impl>)
    return detail::sharded_data_plugin<Impl>();
  else
    return detail::replicated_data_plugin<Impl>();
}

}  // namespace loom::sdk
