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

template <class Impl>
const loom_option_spec* options_of() {
  if constexpr (requires { Impl::options(); })
    return Impl::options();
  else
    return nullptr;
}

template <class Impl>
int32_t score(const loom_host* h, const char** why_not) {
  if constexpr (requires(const Host& hh, std::string& s) { Impl::score(hh, s); }) {
    static thread_local std::string reason;
    reason.clear();
    int32_t s = 0;
    try {
      s = Impl::score(Host(h, Impl::name), reason);
    } catch (const std::exception& e) {
      reason = e.what();
    }
    if (why_not) *why_not = reason.c_str();
    return s;
  } else {
    if (why_not) *why_not = "";
    return 1;
  }
}

template <class Impl>
loom_status create(const loom_host* h, const loom_options* o, void** self, loom_error* err) {
  return guarded(err, [&] { *self = new Impl(Context{Host(h, Impl::name), Options(h, o)}); });
}

template <class Impl>
void destroy(void* self) {
  delete static_cast<Impl*>(self);
}

// The optional entries a plugin provides by name (get_proc): its option rules and validate hook.
// validate(options), or validate(options, host) for a hook that asks the runtime's services
// (a wrapper checks, through loom.plugins, that the plugin it wraps exists and is of its kind).
template <class Impl>
loom_status validate_options(const void* h, const loom_options* o, loom_error* err) {
  return guarded(err, [&] {
    const auto* host = static_cast<const loom_host*>(h);
    if constexpr (requires(const Options& op, const Host& ho) { Impl::validate(op, ho); })
      Impl::validate(Options(host, o), Host(host, Impl::name));
    else
      Impl::validate(Options(host, o));
  });
}

// ABI 1.7: the step's collectives for `loom plan`, from Impl::cost(query).
template <class Impl>
loom_status cost_entry(const loom_cost_query* q, loom_cost_collective* out, int64_t cap, int64_t* n,
                       loom_error* err) {
  return guarded(err, [&] {
    const std::vector<loom_cost_collective> all = Impl::cost(*q);
    *n = static_cast<int64_t>(all.size());
    if (out && *n <= cap) std::copy(all.begin(), all.end(), out);
  });
}

template <class Impl>
const void* procs(const char* name) {
  const std::string n = name ? name : "";
  if constexpr (requires { Impl::option_rules(); })
    if (n == LOOM_PROC_OPTION_RULES) return Impl::option_rules();
  if constexpr (requires(const Options& o) { Impl::validate(o); } || requires(const Options& o, const Host& h) { Impl::validate(o, h); })
    if (n == LOOM_PROC_VALIDATE_OPTIONS) return reinterpret_cast<const void*>(&validate_options<Impl>);
  if constexpr (requires(const loom_cost_query& q) { Impl::cost(q); })
    if (n == LOOM_PROC_COST) return reinterpret_cast<const void*>(&cost_entry<Impl>);
  return nullptr;
}

template <class Impl>
uint64_t capabilities_of() {
  if constexpr (requires { Impl::capabilities; })
    return static_cast<uint64_t>(Impl::capabilities);
  else
    return 0;
}

template <class Impl>
loom_plugin base(loom_kind kind, loom_slot slot, uint32_t size) {
  loom_plugin b{};
  b.v = {LOOM_ABI_MAJOR, LOOM_ABI_MINOR, size};
  b.kind = kind;
  b.slot = slot;
  b.name = Impl::name;
  b.version = Impl::version;
  b.summary = Impl::summary;
  b.options = options_of<Impl>();
  b.score = &score<Impl>;
  b.create = &create<Impl>;
  b.destroy = &destroy<Impl>;
  b.get_proc = &procs<Impl>;
  return b;
}

template <class Impl>
FormatPolicy* policy(void* self) {
  return static_cast<FormatPolicy*>(static_cast<Impl*>(self));
}

// The ABI 1.1 precision entries, each forwarding to a FormatPolicy subclass.
template <class Impl>
void fill_format_policy(loom_precision_v1& t) {
  t.add_site = [](void* self, const char* name, int32_t role, int32_t* id, loom_error* err) {
    return guarded(err, [&] {
      *id = policy<Impl>(self)->add_site(name, static_cast<loom_operand_role>(role));
    });
  };
  t.site_format = [](void* self, int32_t id) {
    return policy<Impl>(self)->site_format(id);
  };
  t.observe = [](void* self, int32_t id, float amax, int32_t clipped) {
    policy<Impl>(self)->observe(id, amax, clipped != 0);
  };
  t.loss_scale = [](void* self) {
    return policy<Impl>(self)->loss_scale();
  };
  t.step_stats = [](void* self, float** data, int64_t* n, loom_error* err) {
    return guarded(err, [&] { *data = policy<Impl>(self)->step_stats(*n); });
  };
  t.end_step = [](void* self, int32_t found_inf, int32_t* skip, loom_error* err) {
    return guarded(err, [&] {
      *skip = policy<Impl>(self)->end_step(found_inf != 0) ? 1 : 0;
    });
  };
  t.metrics = [](void* self, const char** names, double* values, int32_t cap) {
    std::vector<std::pair<const char*, double>> out;
    policy<Impl>(self)->metrics(out);
    int32_t n = 0;
    for (; n < cap && n < static_cast<int32_t>(out.size()); ++n) {
      names[n] = out[n].first;
      values[n] = out[n].second;
    }
    return n;
  };
  t.save_state = [](void* self, void* buf, size_t cap, size_t* bytes, loom_error* err) {
    return guarded(err, [&] {
      std::string s = policy<Impl>(self)->save_state();
      *bytes = s.size();
      if (!buf) return;
      if (cap < s.size()) throw Error(LOOM_INTERNAL, "save_state: buffer too small");
      std::memcpy(buf, s.data(), s.size());
    });
  };
  t.load_state = [](void* self, const void* buf, size_t bytes, loom_error* err) {
    return guarded(err, [&] {
      policy<Impl>(self)->load_state(std::string(static_cast<const char*>(buf), bytes));
    });
  };
}

}  // namespace detail

template <class Impl>
const loom_plugin* precision_plugin() {
  static const loom_precision_v1 table = [] {
    loom_precision_v1 t{};
    t.base = detail::base<Impl>(LOOM_KIND_PRECISION, LOOM_SLOT_NONE, sizeof(loom_precision_v1));
    t.compute_dtype = LOOM_F32;
    if constexpr (requires { Impl::compute_dtype; }) t.compute_dtype = Impl::compute_dtype;
    if constexpr (requires { Impl::exact; }) t.exact = Impl::exact ? 1 : 0;
    t.round_operand = [](void* self, loom_tensor* x, int32_t role, loom_error* err) {
      return detail::guarded(err, [&] {
        static_cast<Impl*>(self)->round_operand(*x, static_cast<loom_operand_role>(role));
      });
    };
    if constexpr (std::is_base_of_v<FormatPolicy, Impl>) detail::fill_format_policy<Impl>(t);
    return t;
  }();
  return &table.base;
}

template <class Impl>
const loom_plugin* ckpt_plugin() {
  static const loom_ckpt_v1 table = [] {
    loom_ckpt_v1 t{};
    t.base = detail::base<Impl>(LOOM_KIND_CKPT, LOOM_SLOT_NONE, sizeof(loom_ckpt_v1));
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
    t.save_stable = [](void* self, const char* dir, const char* name, const void* data, size_t bytes,
                       loom_error* err) {
      return detail::guarded(err, [&] { static_cast<Impl*>(self)->save_stable(dir, name, data, bytes); });
    };
    t.capabilities = detail::capabilities_of<Impl>();
    t.open = [](void* self, const char* root, int32_t rank, int32_t world, loom_error* err) {
      return detail::guarded(err, [&] { static_cast<Impl*>(self)->open(root, rank, world); });
    };
    t.committed = [](void* self, const char* dir, int64_t step, loom_error* err) {
      return detail::guarded(err, [&] { static_cast<Impl*>(self)->committed(dir, step); });
    };
    if constexpr (std::is_base_of_v<CkptReader, Impl>) {
      t.read = [](void* self, const char* dir, const char* name, void* buf, size_t cap, size_t* bytes,
                  loom_error* err) {
        return detail::guarded(err, [&] {
          const std::string data = static_cast<Impl*>(self)->read(dir, name);
          *bytes = data.size();
          if (buf) std::memcpy(buf, data.data(), std::min(cap, data.size()));
        });
      };
      t.list = [](void* self, const char* dir, char* buf, size_t cap, size_t* bytes, loom_error* err) {
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

template <class Impl>
const loom_plugin* comm_plugin() {
  static const loom_comm_v1 table = [] {
    loom_comm_v1 t{};
    t.base = detail::base<Impl>(LOOM_KIND_COMM, LOOM_SLOT_NONE, sizeof(loom_comm_v1));
    t.init = [](void* self, const loom_store* st, int32_t r, int32_t n, int64_t ms, loom_comm** c,
                loom_error* e) {
      return detail::guarded(e, [&] { *c = static_cast<Impl*>(self)->init(*st, r, n, ms); });
    };
    t.split = [](void* self, loom_comm* p, int32_t color, int32_t key, loom_comm** c,
                 loom_error* e) {
      return detail::guarded(e, [&] { *c = static_cast<Impl*>(self)->split(p, color, key); });
    };
    t.free_comm = [](void* self, loom_comm* c) { static_cast<Impl*>(self)->free_comm(c); };
    t.rank = [](void* self, const loom_comm* c) { return static_cast<int32_t>(static_cast<Impl*>(self)->rank(c)); };
    t.size = [](void* self, const loom_comm* c) { return static_cast<int32_t>(static_cast<Impl*>(self)->size(c)); };
    t.all_reduce = [](void* self, loom_comm* c, loom_tensor* b, int32_t o, loom_work** w,
                      loom_error* e) {
      return detail::guarded(e, [&] {
        loom_work* h = static_cast<Impl*>(self)->all_reduce(c, *b, static_cast<loom_reduce_op>(o), w != nullptr);
        if (w) *w = h;
      });
    };
    t.reduce_scatter = [](void* self, loom_comm* c, const loom_tensor* in, loom_tensor* o,
                          int32_t r, loom_work** w, loom_error* e) {
      return detail::guarded(e, [&] {
        loom_work* h = static_cast<Impl*>(self)->reduce_scatter(c, *in, *o, static_cast<loom_reduce_op>(r), w != nullptr);
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
    t.send = [](void* self, loom_comm* c, const loom_tensor* b, int32_t peer, int32_t tag,
                loom_work** w, loom_error* e) {
      return detail::guarded(e, [&] {
        loom_work* h = static_cast<Impl*>(self)->send(c, *b, peer, tag, w != nullptr);
        if (w) *w = h;
      });
    };
    t.recv = [](void* self, loom_comm* c, loom_tensor* b, int32_t peer, int32_t tag,
                loom_work** w, loom_error* e) {
      return detail::guarded(e, [&] {
        loom_work* h = static_cast<Impl*>(self)->recv(c, *b, peer, tag, w != nullptr);
        if (w) *w = h;
      });
    };
    t.barrier = [](void* self, loom_comm* c, loom_error* e) {
      return detail::guarded(e, [&] { static_cast<Impl*>(self)->barrier(c); });
    };
    t.wait = [](void* self, loom_work* w, loom_error* e) {
      return detail::guarded(e, [&] { static_cast<Impl*>(self)->wait(w); });
    };
    return t;
  }();
  return &table.base;
}

template <class Impl>
const loom_plugin* data_plugin() {
  static const loom_data_v1 table = [] {
    loom_data_v1 t{};
    t.base = detail::base<Impl>(LOOM_KIND_PARALLEL, LOOM_SLOT_DATA, sizeof(loom_data_v1));
    t.setup = [](void* self, const loom_data_context* c, loom_error* e) {
      return detail::guarded(e, [&] { static_cast<Impl*>(self)->setup(*c); });
    };
    t.grad_ready = [](void* self, int64_t p, loom_error* e) {
      return detail::guarded(e, [&] { static_cast<Impl*>(self)->grad_ready(p); });
    };
    t.finish_grads = [](void* self, double* comm_ms, double* exposed, loom_error* e) {
      return detail::guarded(e, [&] { static_cast<Impl*>(self)->finish_grads(*comm_ms, *exposed); });
    };
    t.accounting = [](void* self, int64_t* out, loom_error* e) {
      return detail::guarded(e, [&] { static_cast<Impl*>(self)->accounting(out); });
    };
    t.zero_stage = [](void* self) { return static_cast<int32_t>(static_cast<Impl*>(self)->zero_stage()); };
    t.acquire_params = [](void* self, int64_t u, int32_t flags, float** values, loom_error* e) {
      return detail::guarded(e, [&] {
        *values = static_cast<Impl*>(self)->acquire_params(u, (flags & LOOM_ACQUIRE_BACKWARD) != 0,
                                                           (flags & LOOM_ACQUIRE_PREFETCH) != 0);
      });
    };
    t.release_params = [](void* self, int64_t u, loom_error* e) {
      return detail::guarded(e, [&] { static_cast<Impl*>(self)->release_params(u); });
    };
    t.grad_buffer = [](void* self, int64_t u, float** grads, loom_error* e) {
      return detail::guarded(e, [&] { *grads = static_cast<Impl*>(self)->grad_buffer(u); });
    };
    t.unit_grads_ready = [](void* self, int64_t u, int32_t last, loom_error* e) {
      return detail::guarded(e, [&] { static_cast<Impl*>(self)->unit_grads_ready(u, last != 0); });
    };
    t.sum_squares = [](void* self, int32_t which, double* out, loom_error* e) {
      return detail::guarded(e, [&] { static_cast<Impl*>(self)->sum_squares(which, out); });
    };
    t.step = [](void* self, const loom_adamw* hp, loom_error* e) {
      return detail::guarded(e, [&] { static_cast<Impl*>(self)->step(*hp); });
    };
    t.shard_pieces = [](void* self, loom_shard_piece* out, int64_t cap, int64_t* n, loom_error* e) {
      return detail::guarded(e, [&] {
        auto pieces = static_cast<Impl*>(self)->shard_pieces();
        *n = static_cast<int64_t>(pieces.size());
        if (out && *n <= cap) std::copy(pieces.begin(), pieces.end(), out);
      });
    };
    t.pieces_loaded = [](void* self, loom_error* e) {
      return detail::guarded(e, [&] { static_cast<Impl*>(self)->pieces_loaded(); });
    };
    t.capabilities = detail::capabilities_of<Impl>();
    t.save_state = [](void* self, void* buf, size_t cap, size_t* bytes, loom_error* e) {
      return detail::guarded(e, [&] {
        const std::string s = static_cast<Impl*>(self)->save_state();
        *bytes = s.size();
        if (buf) std::memcpy(buf, s.data(), std::min(cap, s.size()));
      });
    };
    t.load_state = [](void* self, const void* buf, size_t bytes, loom_error* e) {
      return detail::guarded(e, [&] {
        static_cast<Impl*>(self)->load_state(std::string(static_cast<const char*>(buf), bytes));
      });
    };
    return t;
  }();
  return &table.base;
}

template <class Impl>
const loom_plugin* tensor_plugin() {
  static const loom_tensor_v1 table = [] {
    loom_tensor_v1 t{};
    t.base = detail::base<Impl>(LOOM_KIND_PARALLEL, LOOM_SLOT_TENSOR, sizeof(loom_tensor_v1));
    t.setup = [](void* self, const loom_tensor_context* c, loom_error* e) {
      return detail::guarded(e, [&] { static_cast<Impl*>(self)->setup(*c); });
    };
    t.shard = [](void* self, int32_t role, int32_t ndim, const int64_t* shape, int32_t fused,
                 loom_slice* out, loom_error* e) {
      return detail::guarded(e, [&] {
        *out = static_cast<Impl*>(self)->shard(static_cast<loom_role>(role), ndim, shape, fused);
      });
    };
    t.enter_bwd = [](void* self, loom_tensor* x, loom_error* e) {
      return detail::guarded(e, [&] { static_cast<Impl*>(self)->enter_bwd(*x); });
    };
    t.exit_fwd = [](void* self, loom_tensor* x, loom_error* e) {
      return detail::guarded(e, [&] { static_cast<Impl*>(self)->exit_fwd(*x); });
    };
    t.embedding_fwd = [](void* self, float* out, const int32_t* tok, int64_t N, const float* wte,
                         int64_t vb, int64_t vl, int64_t C, loom_error* e) {
      return detail::guarded(e, [&] { static_cast<Impl*>(self)->embedding_fwd(out, tok, N, wte, vb, vl, C); });
    };
    t.embedding_bwd = [](void* self, float* dwte, const float* dout, const int32_t* tok, int64_t N,
                         int64_t vb, int64_t vl, int64_t C, loom_error* e) {
      return detail::guarded(e, [&] { static_cast<Impl*>(self)->embedding_bwd(dwte, dout, tok, N, vb, vl, C); });
    };
    t.cross_entropy = [](void* self, float* logits, const int32_t* tgt, int64_t N, int64_t vb,
                         int64_t vl, int64_t vr, float dloss, double* loss, loom_error* e) {
      return detail::guarded(e, [&] {
        *loss = static_cast<Impl*>(self)->cross_entropy(logits, tgt, N, vb, vl, vr, dloss);
      });
    };
    return t;
  }();
  return &table.base;
}

template <class Impl>
const loom_plugin* sequence_plugin() {
  static const loom_sequence_v1 table = [] {
    loom_sequence_v1 t{};
    t.base = detail::base<Impl>(LOOM_KIND_PARALLEL, LOOM_SLOT_SEQUENCE, sizeof(loom_sequence_v1));
    t.setup = [](void* self, const loom_tensor_context* c, loom_error* e) {
      return detail::guarded(e, [&] { static_cast<Impl*>(self)->setup(*c); });
    };
    t.gather = [](void* self, const loom_tensor* local, loom_tensor* full, loom_error* e) {
      return detail::guarded(e, [&] { static_cast<Impl*>(self)->gather(*local, *full); });
    };
    t.scatter = [](void* self, const loom_tensor* full, loom_tensor* local, loom_error* e) {
      return detail::guarded(e, [&] { static_cast<Impl*>(self)->scatter(*full, *local); });
    };
    t.reduce_replicated = [](void* self, loom_tensor* g, loom_error* e) {
      return detail::guarded(e, [&] { static_cast<Impl*>(self)->reduce_replicated(*g); });
    };
    return t;
  }();
  return &table.base;
}

template <class Impl>
const loom_plugin* pipeline_plugin() {
  static const loom_pipeline_v1 table = [] {
    loom_pipeline_v1 t{};
    t.base = detail::base<Impl>(LOOM_KIND_PARALLEL, LOOM_SLOT_PIPELINE, sizeof(loom_pipeline_v1));
    t.configure = [](void* self, loom_pipeline_shape* shape, loom_error* e) {
      return detail::guarded(e, [&] { static_cast<Impl*>(self)->configure(*shape); });
    };
    t.partition = [](void* self, const loom_pipeline_shape* shape, int32_t n, const char* kinds,
                     const double* costs, const char* layout, int32_t* stage_of, loom_error* e) {
      return detail::guarded(e, [&] {
        auto s = static_cast<Impl*>(self)->partition(*shape, std::string(kinds, n),
                                                     std::vector<double>(costs, costs + n), layout);
        if (s.size() != static_cast<size_t>(n)) throw Error(LOOM_INTERNAL, "partition size mismatch");
        std::copy(s.begin(), s.end(), stage_of);
      });
    };
    t.schedule = [](void* self, const loom_pipeline_shape* shape, int32_t rank, loom_pipe_action* out,
                    int64_t cap, int64_t* n, loom_error* e) {
      return detail::guarded(e, [&] {
        auto a = static_cast<Impl*>(self)->schedule(*shape, rank);
        if (static_cast<int64_t>(a.size()) > cap) throw Error(LOOM_INTERNAL, "schedule longer than cap");
        std::copy(a.begin(), a.end(), out);
        *n = static_cast<int64_t>(a.size());
      });
    };
    return t;
  }();
  return &table.base;
}

template <class Impl>
const loom_plugin* expert_plugin() {
  static const loom_expert_v1 table = [] {
    loom_expert_v1 t{};
    t.base = detail::base<Impl>(LOOM_KIND_PARALLEL, LOOM_SLOT_EXPERT, sizeof(loom_expert_v1));
    t.setup = [](void* self, const loom_expert_context* c, int32_t* first, int32_t* count, loom_error* e) {
      return detail::guarded(e, [&] { static_cast<Impl*>(self)->setup(*c, *first, *count); });
    };
    t.exchange_counts = [](void* self, const int64_t* sent, int64_t* received, loom_error* e) {
      return detail::guarded(e, [&] { static_cast<Impl*>(self)->exchange_counts(sent, received); });
    };
    t.dispatch = [](void* self, const loom_tensor* rows, const int64_t* sent, const int64_t* received,
                    loom_tensor* out, loom_error* e) {
      return detail::guarded(e, [&] { static_cast<Impl*>(self)->dispatch(*rows, sent, received, *out); });
    };
    t.combine = [](void* self, const loom_tensor* rows, const int64_t* sent, const int64_t* received,
                   loom_tensor* out, loom_error* e) {
      return detail::guarded(e, [&] { static_cast<Impl*>(self)->combine(*rows, sent, received, *out); });
    };
    return t;
  }();
  return &table.base;
}

template <class Impl>
const loom_plugin* context_plugin() {
  static const loom_context_v1 table = [] {
    loom_context_v1 t{};
    t.base = detail::base<Impl>(LOOM_KIND_PARALLEL, LOOM_SLOT_CONTEXT, sizeof(loom_context_v1));
    t.setup = [](void* self, const loom_context_context* c, loom_error* e) {
      return detail::guarded(e, [&] { static_cast<Impl*>(self)->setup(*c); });
    };
    t.split = [](void* self, int64_t seq_len, int32_t rank, loom_position_run* runs, int32_t cap,
                 int32_t* n, loom_error* e) {
      return detail::guarded(e, [&] {
        auto r = static_cast<Impl*>(self)->split(seq_len, rank);
        if (static_cast<int64_t>(r.size()) > cap) throw Error(LOOM_INTERNAL, "more position runs than cap");
        std::copy(r.begin(), r.end(), runs);
        *n = static_cast<int32_t>(r.size());
      });
    };
    t.attention_fwd = [](void* self, const loom_attention_args* a, loom_error* e) {
      return detail::guarded(e, [&] { static_cast<Impl*>(self)->attention_fwd(*a); });
    };
    t.attention_bwd = [](void* self, const loom_attention_args* a, loom_error* e) {
      return detail::guarded(e, [&] { static_cast<Impl*>(self)->attention_bwd(*a); });
    };
    t.stats = [](void* self, double* compute_ms, double* exposed_ms, int64_t* bytes, loom_error* e) {
      return detail::guarded(e, [&] { static_cast<Impl*>(self)->stats(*compute_ms, *exposed_ms, *bytes); });
    };
    return t;
  }();
  return &table.base;
}

}  // namespace loom::sdk
