#include "loader/host.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <utility>
#include <vector>

#include "core/errors.hpp"
#include "loader/descriptor.hpp"
#include "loader/services.hpp"
#include "tensor/tensor.hpp"

namespace loom::plugins {

namespace {

std::mutex log_mutex;

void log(int32_t level, const char* plugin, const char* msg) {
  static const char* names[] = {"debug", "info", "warn", "error"};
  if (level < LOOM_LOG_INFO && !std::getenv("LOOM_DEBUG")) return;
  const char* name = level >= 0 && level <= 3 ? names[level] : "log";
  std::lock_guard<std::mutex> lock(log_mutex);
  std::fprintf(stderr, "[%s] %s: %s\n", plugin ? plugin : "plugin", name, msg ? msg : "");
}

loom_status set_error(loom_error* err, loom_status s, const char* msg) {
  if (err) {
    err->status = s;
    err->message = msg ? msg : "";
  }
  return s;
}

template <class T>
loom_status read(const loom_options* o, const char* key, T* out) {
  if (!o || !o->table || !key || !out) return LOOM_BAD_CONFIG;
  const toml::node* n = o->table->get(key);
  if (!n) return LOOM_BAD_CONFIG;
  if constexpr (std::is_same_v<T, double>) {
    if (!n->is_floating_point() && !n->is_integer()) return LOOM_BAD_CONFIG;
    *out = n->value<double>().value();
  } else {
    if (!n->is<T>()) return LOOM_BAD_CONFIG;
    *out = n->value<T>().value();
  }
  return LOOM_OK;
}

loom_status opt_i64(const loom_options* o, const char* key, int64_t* out) {
  return read(o, key, out);
}
loom_status opt_f64(const loom_options* o, const char* key, double* out) {
  return read(o, key, out);
}
loom_status opt_bool(const loom_options* o, const char* key, int32_t* out) {
  bool b = false;
  loom_status s = read(o, key, &b);
  if (s == LOOM_OK) *out = b ? 1 : 0;
  return s;
}
loom_status opt_str(const loom_options* o, const char* key, const char** out) {
  if (!o || !o->table || !key || !out) return LOOM_BAD_CONFIG;
  const toml::node* n = o->table->get(key);
  if (!n || !n->is_string()) return LOOM_BAD_CONFIG;
  *out = n->as_string()->get().c_str();
  return LOOM_OK;
}

// CPU memory carries its size in a 64-byte header, so the tensor heap's peak counts it; a device
// allocation comes from the device's tensor allocator when one is installed.
void* alloc(loom_device device, size_t bytes) {
  const TensorAllocator& device_alloc = tensor_allocator();
  if (device.kind != LOOM_DEVICE_CPU)
    return device_alloc.alloc && device_alloc.device.kind == device.kind
               ? device_alloc.alloc(bytes ? bytes : 64)
               : nullptr;
  const size_t rounded = (bytes + 63) / 64 * 64;
  auto* p = static_cast<char*>(std::aligned_alloc(64, rounded + 64));
  if (!p) return nullptr;
  *reinterpret_cast<size_t*>(p) = rounded;
  heap_bytes_held(static_cast<int64_t>(rounded));
  return p + 64;
}

void release(loom_device device, void* ptr) {
  if (!ptr) return;
  if (device.kind != LOOM_DEVICE_CPU) {
    if (tensor_allocator().free) tensor_allocator().free(ptr);
    return;
  }
  char* p = static_cast<char*>(ptr) - 64;
  heap_bytes_held(-static_cast<int64_t>(*reinterpret_cast<size_t*>(p)));
  std::free(p);
}

loom_error* error_new() { return new loom_error(); }
void error_free(loom_error* e) { delete e; }
const char* error_message(const loom_error* e) { return e ? e->message.c_str() : ""; }

}  // namespace

loom_host& host() {
  static loom_host h = [] {
    loom_host t{};
    t.v = LOOM_VERSION_OF(loom_host);
    t.runtime_version = LOOM_VERSION_STRING;
    t.log = &log;
    t.set_error = &set_error;
    t.opt_i64 = &opt_i64;
    t.opt_f64 = &opt_f64;
    t.opt_bool = &opt_bool;
    t.opt_str = &opt_str;
    t.alloc = &alloc;
    t.free = &release;
    t.service = &find_declared_service;
    t.error_new = &error_new;
    t.error_free = &error_free;
    t.error_message = &error_message;
    return t;
  }();
  return h;
}

const loom_host& v2_host() {
  static const loom_host h = [] {
    loom_host t = host();
    t.v = {2, kLastV2Minor, sizeof(loom_host)};  // ABI 3 kept the host table's layout
    t.service = &find_declared_service_v2;
    return t;
  }();
  return h;
}

const loom_host& host_for(const loom_plugin* desc) {
  return desc && desc->v.major == 2 ? v2_host() : host();
}

const char* status_name(loom_status s) {
  switch (s) {
    case LOOM_OK:
      return "ok";
    case LOOM_UNAVAILABLE:
      return "unavailable";
    case LOOM_BAD_CONFIG:
      return "bad config";
    case LOOM_SYSTEM:
      return "system error";
    case LOOM_INTERNAL:
      return "internal error";
    case LOOM_FATAL:
      return "fatal";
  }
  return "unknown status";
}

uint64_t data_capabilities(const loom_plugin* d) {
  if (d->kind != LOOM_KIND_PARALLEL || d->slot != LOOM_SLOT_DATA) return 0;
  return reinterpret_cast<const loom_data_v2*>(d)->capabilities;
}

uint64_t ckpt_capabilities(const loom_plugin* d) {
  if (d->kind != LOOM_KIND_CKPT) return 0;
  return reinterpret_cast<const loom_ckpt_v2*>(d)->capabilities;
}

uint64_t comm_capabilities(const loom_plugin* d) {
  if (d->kind != LOOM_KIND_COMM) return 0;
  const auto* t = reinterpret_cast<const loom_comm_v2*>(d);
  return LOOM_HAS_FIELD(&t->base, loom_comm_v2, capabilities) ? t->capabilities : 0;
}

loom_comm_v2 full_comm_table(const loom_comm_v2* t) {
  loom_comm_v2 out{};
  std::memcpy(static_cast<void*>(&out), t, std::min<size_t>(t->base.v.size, sizeof out));
  out.base.v.size = sizeof out;
  return out;
}

std::string declared_note(const loom_plugin* d) {
  if (d->kind == LOOM_KIND_COMM && d->v.major == 2 && d->v.minor < 4)
    return " (it was built against plugin ABI 2." + std::to_string(d->v.minor) +
           ", before comm plugins declared capabilities: rebuild it against ABI 3 and declare "
           "LOOM_COMM_P2P)";
  if (d->kind == LOOM_KIND_COMM && d->v.major == 1)
    return " (it was built against plugin ABI 1, before comm plugins declared capabilities)";
  if (d->v.major != 1 || d->v.minor >= 6) return "";
  return " (it was built against plugin ABI 1." + std::to_string(d->v.minor) +
         ", before plugins declared capabilities)";
}

std::string capability_names(const loom_plugin* d) {
  std::vector<std::pair<uint64_t, const char*>> names;
  uint64_t caps = 0;
  if (d->kind == LOOM_KIND_PARALLEL && d->slot == LOOM_SLOT_DATA) {
    caps = data_capabilities(d);
    names = {{LOOM_DATA_EXPERTS, "experts"},
             {LOOM_DATA_PIPELINE, "pipeline"},
             {LOOM_DATA_SHARDED, "sharded state"},
             {LOOM_DATA_DEVICE, "device state"},
             {LOOM_DATA_DIVERGES, "replicas diverge between syncs"}};
  } else if (d->kind == LOOM_KIND_COMM) {
    caps = comm_capabilities(d);
    names = {{LOOM_COMM_P2P, "point-to-point"}};
  } else if (d->kind == LOOM_KIND_CKPT) {
    caps = ckpt_capabilities(d);
    names = {{LOOM_CKPT_ASYNC, "async"}};
    if (reinterpret_cast<const loom_ckpt_v2*>(d)->read) names.push_back({0, "reads back"});
  }
  std::string out;
  for (auto [flag, name] : names)
    if (flag == 0 || (caps & flag)) out += (out.empty() ? "" : ", ") + std::string(name);
  return out;
}

loom_cost_fn cost_entry(const loom_plugin* d) {
  if (d->kind != LOOM_KIND_PARALLEL) return nullptr;
  switch (d->slot) {
    case LOOM_SLOT_DATA:
      return reinterpret_cast<const loom_data_v2*>(d)->cost;
    case LOOM_SLOT_TENSOR:
      return reinterpret_cast<const loom_tensor_v2*>(d)->cost;
    case LOOM_SLOT_SEQUENCE:
      return reinterpret_cast<const loom_sequence_v2*>(d)->cost;
    case LOOM_SLOT_PIPELINE:
      return reinterpret_cast<const loom_pipeline_v2*>(d)->cost;
    case LOOM_SLOT_EXPERT:
      return reinterpret_cast<const loom_expert_v2*>(d)->cost;
    case LOOM_SLOT_CONTEXT:
      return reinterpret_cast<const loom_context_v2*>(d)->cost;
  }
  return nullptr;
}

// Whether the plugin keeps state of its own in checkpoints (data and precision slots).
bool keeps_state(const loom_plugin* d) {
  if (d->kind == LOOM_KIND_PRECISION)
    return reinterpret_cast<const loom_precision_v2*>(d)->save_state != nullptr;
  if (d->kind == LOOM_KIND_PARALLEL && d->slot == LOOM_SLOT_DATA)
    return reinterpret_cast<const loom_data_v2*>(d)->save_state != nullptr;
  return false;
}

std::vector<std::string> optional_entries(const loom_plugin* d) {
  std::vector<std::string> out;
  if (d->option_rules) out.push_back("option rules");
  if (d->validate_options) out.push_back("validate hook");
  if (cost_entry(d)) out.push_back("cost entry");
  if (keeps_state(d)) out.push_back("state save and load");
  if (d->kind == LOOM_KIND_CKPT && reinterpret_cast<const loom_ckpt_v2*>(d)->read)
    out.push_back("read path");
  return out;
}

std::string describe(const loom_error& e) {
  std::string s = status_name(e.status);
  return e.message.empty() ? s : s + ": " + e.message;
}

void check(loom_status s, const loom_error& e, const std::string& what) {
  if (s == LOOM_OK) return;
  if (s == LOOM_BAD_CONFIG) throw ConfigError(e.message);
  throw RuntimeError(what + ": " + e.message);
}

}  // namespace loom::plugins
