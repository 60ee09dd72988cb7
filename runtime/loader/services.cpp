#include "loader/services.hpp"

#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <vector>

#include "core/bar_list.hpp"
#include "loader/descriptor.hpp"
#include "ops/typed_ops.hpp"

namespace loom::plugins {
namespace {

using Clock = std::chrono::steady_clock;

// ---- loom.placement ----

struct PlacementState {
  bool set = false;
  loom_placement value{};
  std::string host;
};
PlacementState& placement_state() {
  static PlacementState s;
  return s;
}

// ---- loom.trace: spans begun and not yet ended, by token ----

struct TraceState {
  std::mutex m;
  SpanSink sink;
  int64_t next = 1;
  std::map<int64_t, std::tuple<std::string, std::string, Clock::time_point>> open;
};
TraceState& trace_state() {
  static TraceState s;
  return s;
}

int64_t trace_begin(const char* name, const char* category) {
  TraceState& t = trace_state();
  std::lock_guard<std::mutex> lock(t.m);
  if (!t.sink) return 0;
  const int64_t token = t.next++;
  t.open[token] = {name ? name : "", category ? category : "plugin", Clock::now()};
  return token;
}

void trace_end(int64_t token) {
  TraceState& t = trace_state();
  std::lock_guard<std::mutex> lock(t.m);
  auto it = t.open.find(token);
  if (it == t.open.end()) return;
  auto [name, category, begin] = it->second;
  t.open.erase(it);
  if (t.sink) t.sink(name, category, begin, Clock::now());
}

const loom_trace kTrace = {LOOM_VERSION_OF(loom_trace), &trace_begin, &trace_end};

// ---- loom.plugins ----

const loom_plugins*& plugins_table() {
  static const loom_plugins* table = nullptr;
  return table;
}
const loom_plugins*& v2_plugins_table() {
  static const loom_plugins* table = nullptr;
  return table;
}

// ---- loom.step and loom.config (ABI 3) ----

struct StepState {
  bool set = false;
  loom_step_info value{LOOM_VERSION_OF(loom_step_info), 0, 0, -1, 1, 1, 0};
};
StepState& step_state() {
  static StepState s;
  return s;
}
const loom_config_reader*& config_reader() {
  static const loom_config_reader* reader = nullptr;
  return reader;
}

// Each ABI 2 and 3 plugin's declared services (loom_plugin.services), by plugin name.
struct Declared {
  std::mutex m;
  std::map<std::string, std::set<std::string>> of;
};
Declared& declared() {
  static Declared d;
  return d;
}

}  // namespace

void set_placement(const loom_placement& p, const std::string& host_name) {
  PlacementState& s = placement_state();
  s.host = host_name;
  s.value = p;
  s.value.v = LOOM_VERSION_OF(loom_placement);
  s.value.host = s.host.c_str();
  s.set = true;
}

void set_span_sink(SpanSink sink) {
  TraceState& t = trace_state();
  std::lock_guard<std::mutex> lock(t.m);
  t.sink = std::move(sink);
  t.open.clear();
}

void start_steps(uint64_t seed, int32_t micro_batches) {
  StepState& s = step_state();
  s.value = StepState{}.value;
  s.value.seed = seed;
  s.value.micro_batches = micro_batches;
  s.set = true;
}
void set_step(int64_t step) { step_state().value.step = step, step_state().value.micro_batch = -1; }
void set_micro_batch(int32_t micro_batch) { step_state().value.micro_batch = micro_batch; }
void set_training(bool training) { step_state().value.training = training ? 1 : 0; }
const loom_step_info* step_info() { return step_state().set ? &step_state().value : nullptr; }
const loom_step_info& step_now() { return step_state().value; }
void set_config_service(const loom_config_reader* reader) { config_reader() = reader; }

void set_plugins_service(const loom_plugins* table, const loom_plugins* v2_table) {
  plugins_table() = table;
  v2_plugins_table() = v2_table;
}

namespace {
const loom_ops_v2*& device_ops() {
  static const loom_ops_v2* ops = nullptr;
  return ops;
}
const loom_native_streams*& native_streams() {
  static const loom_native_streams* streams = nullptr;
  return streams;
}
}  // namespace

void set_device_ops(const loom_ops_v2* ops) { device_ops() = ops; }
void set_native_streams(const loom_native_streams* streams) { native_streams() = streams; }

std::vector<std::string> declared_services(const loom_plugin* d) {
  return split_bar_list(d->services);
}

void declare_services(const loom_plugin* desc, bool created) {
  const std::vector<std::string> names = declared_services(desc);
  std::lock_guard<std::mutex> lock(declared().m);
  auto [it, fresh] = declared().of.try_emplace(desc->name);
  if (fresh || created) it->second = std::set<std::string>(names.begin(), names.end());
}

const loom_ops* ops_for(const loom_plugin* desc, const loom_ops_v2* kernels) {
  if (!kernels || !desc || desc->v.major >= 3) return ops::typed(kernels);
  return reinterpret_cast<const loom_ops*>(kernels);  // ABI 1 and 2 were built against this one
}

namespace {
bool declares(const char* plugin, const char* name) {
  if (!plugin || !name) return false;
  std::lock_guard<std::mutex> lock(declared().m);
  auto it = declared().of.find(plugin);
  return it != declared().of.end() && it->second.count(name) > 0;
}
}  // namespace

const void* find_declared_service(const char* plugin, const char* name, uint32_t min_minor) {
  if (!declares(plugin, name) || min_minor > LOOM_ABI_MINOR) return nullptr;
  if (std::strcmp(name, LOOM_SERVICE_DEVICE) == 0) return ops::typed(device_ops());
  if (std::strcmp(name, LOOM_SERVICE_PLUGINS) == 0) return plugins_table();
  if (std::strcmp(name, LOOM_SERVICE_STEP) == 0) return step_info();
  if (std::strcmp(name, LOOM_SERVICE_CONFIG) == 0) return config_reader();
  return find_service(name, 0);
}

const void* find_declared_service_v2(const char* plugin, const char* name, uint32_t min_minor) {
  return declares(plugin, name) ? find_service(name, min_minor) : nullptr;
}

const void* find_service(const char* name, uint32_t min_minor) {
  if (!name || min_minor > kLastV2Minor) return nullptr;
  if (std::strcmp(name, LOOM_SERVICE_PLACEMENT) == 0)
    return placement_state().set ? &placement_state().value : nullptr;
  if (std::strcmp(name, LOOM_SERVICE_TRACE) == 0) return &kTrace;
  if (std::strcmp(name, LOOM_SERVICE_PLUGINS) == 0) return v2_plugins_table();
  if (std::strcmp(name, LOOM_SERVICE_DEVICE) == 0) return device_ops();
  if (std::strcmp(name, LOOM_SERVICE_NATIVE_STREAMS) == 0) return native_streams();
  return nullptr;
}

}  // namespace loom::plugins
