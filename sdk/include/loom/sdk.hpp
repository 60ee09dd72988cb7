// Loom plugin SDK: a header-only C++ layer over loom/plugin.h.
//
// A plugin writes a class per strategy, derives it from the base class of its kind, and lists the
// classes in LOOM_PLUGIN(...). The macro generates the C entry point; the trampolines here turn any
// exception into a status plus message, so nothing C++ ever crosses the boundary.
//
//   struct Tf32 : loom::sdk::PrecisionPlugin {
//     static constexpr const char* name = "tf32", *version = "1.0.0", *summary = "...";
//     static const loom_option_spec* options();           // optional
//     static int score(const loom::sdk::Host&, std::string& why_not);  // optional, default 1
//     explicit Tf32(const loom::sdk::Context& ctx);
//     ...overrides...
//   };
//   LOOM_PLUGIN(loom::sdk::precision_plugin<Tf32>())
#pragma once

#include <loom/plugin.h>

#include <exception>
#include <stdexcept>
#include <string>

namespace loom::sdk {

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
  void log(loom_log_level level, const std::string& msg) const {
    h_->log(level, plugin_, msg.c_str());
  }
  void info(const std::string& msg) const { log(LOOM_LOG_INFO, msg); }
  void warn(const std::string& msg) const { log(LOOM_LOG_WARN, msg); }

 private:
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

// ---- base classes, one per kind -------------------------------------------------------------

class Plugin {
 public:
  virtual ~Plugin() = default;
};

class PrecisionPlugin : public Plugin {
 public:
  // A subclass may declare `static constexpr loom_dtype compute_dtype = LOOM_BF16;` (default f32)
  // and `static constexpr bool exact = true;` when round_operand changes nothing.
  // Rounds an fp32 operand in place to the numbers this precision computes with.
  virtual void round_operand(loom_tensor& t, loom_operand_role role) = 0;
};

class CkptPlugin : public Plugin {
 public:
  virtual void save(const std::string& dir, const std::string& name, const void* data,
                    size_t bytes) = 0;
  virtual void finish() {}
};

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

inline const void* no_procs(const char*) { return nullptr; }

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
  b.get_proc = &no_procs;
  return b;
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
    return t;
  }();
  return &table.base;
}

}  // namespace loom::sdk

// Generates loom_plugin_entry_v1 returning the listed descriptors.
#define LOOM_PLUGIN(...)                                                                         \
  extern "C" LOOM_EXPORT loom_status loom_plugin_entry_v1(                                       \
      const loom_host* host, const loom_plugin* const** out, size_t* count, loom_error* err) {  \
    ::loom::sdk::detail::host() = host;                                                          \
    return ::loom::sdk::detail::guarded(err, [&] {                                               \
      static const loom_plugin* const list[] = {__VA_ARGS__};                                    \
      *out = list;                                                                               \
      *count = sizeof(list) / sizeof(list[0]);                                                   \
    });                                                                                          \
  }
