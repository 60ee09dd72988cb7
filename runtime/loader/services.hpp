// The optional services a plugin finds through loom_host.service: where it runs
// (loom.placement), spans on the run's trace (loom.trace), and other plugins to wrap
// (loom.plugins). Each is NULL until the part of the runtime that provides it has started.
#pragma once

#include <loom/plugin.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "tensor/ops_v2.h"

namespace loom::plugins {

// Set by `loom train` once the rank and the mesh are known, before any plugin is created.
void set_placement(const loom_placement& placement, const std::string& host);
// loom.device: the op table of the device this process trains on.
void set_device_ops(const loom_ops_v2* ops);
// The device's native streams (loom.native_streams), or nullptr (cpu, strict).
void set_native_streams(const loom_native_streams* streams);

// loom.step (ABI 3): started by `loom train` with [run] seed and the micro-batches per step, then
// kept current by the step as it goes (set_step at its start, set_micro_batch around each
// forward and backward, set_training around evaluation).
void start_steps(uint64_t seed, int32_t micro_batches);
void set_step(int64_t step);
void set_micro_batch(int32_t micro_batch);
void set_training(bool training);
// The struct loom.step hands out, or nullptr before start_steps; step_now() is the same struct
// at any time (step 0, one micro-batch, training, before start_steps).
const loom_step_info* step_info();
const loom_step_info& step_now();
// loom.config (ABI 3): installed with the configuration plugins are created from (selection.hpp).
void set_config_service(const loom_config_reader* reader);

// Where plugins' spans go while a run traces; an empty function stops them.
using SpanSink = std::function<void(const std::string& name, const std::string& category,
                                    std::chrono::steady_clock::time_point begin,
                                    std::chrono::steady_clock::time_point end)>;
void set_span_sink(SpanSink sink);

// loom.plugins' table, or nullptr while no command gave a configuration to create plugins from.
// Its entries resolve plugins from a registry and a config, above this layer: set_plugin_source
// (loader/selection.hpp) installs it.
// `table` serves ABI 3 plugins, `v2_table` ABI 1 and 2 ones (a wrapper and the parallel plugin
// it wraps must share a major: the op table in a setup context is the wrapper's).
void set_plugins_service(const loom_plugins* table, const loom_plugins* v2_table);

// A service by name as ABI 2 serves it (minors up to 2.7; loom.device is ABI 2's op table), for
// the runtime, the ABI 1 host (which grants every service) and ABI 2 plugins.
const void* find_service(const char* name, uint32_t min_minor);
// loom_host.service: the service, when `plugin` declared it in loom_plugin.services, as ABI 3
// serves it (loom.device is the typed table; min_minor counts ABI 3's minors).
const void* find_declared_service(const char* plugin, const char* name, uint32_t min_minor);
// The same for ABI 2's host: as find_service answers.
const void* find_declared_service_v2(const char* plugin, const char* name, uint32_t min_minor);
// Records what an ABI 2 or 3 plugin declared, by name: when its library is loaded (the first
// library holding the name, in search order, which is the one a run would pick), and again when an
// instance is created (`created`), from the descriptor actually used.
void declare_services(const loom_plugin* desc, bool created = false);
// The op table a plugin's setup context carries: ABI 3's typed table over `kernels` for an ABI 3
// plugin, `kernels` itself (ABI 2's layout) for one built for ABI 1 or 2.
const loom_ops* ops_for(const loom_plugin* desc, const loom_ops_v2* kernels);
// The services it declares (loom_plugin.services), the only ones its host hands it.
std::vector<std::string> declared_services(const loom_plugin* desc);

}  // namespace loom::plugins
