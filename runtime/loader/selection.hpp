// Resolves the plugins a configuration names: finds each slot's plugin, checks its kind and slot,
// and validates every [plugins.<name>] option table against that plugin's declared schema.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "loader/host.hpp"
#include "loader/registry.hpp"

namespace loom::plugins {

struct SlotChoice {
  std::string slot;  // the [plugins] key: "precision", "data", ...
  Found found;
  loom_options options{};  // its [plugins.<name>] table, checked, as create() takes it
};

struct Selection {
  std::vector<SlotChoice> slots;  // only the slots the config fills
  // Each plugin with an option table, with its keys (for `config show`).
  std::vector<std::pair<std::string, std::vector<config::KeySpec>>> schemas;

  const SlotChoice* slot(const std::string& key) const;
};

// Checks [plugins] and each chosen plugin's options. Throws ConfigError or RuntimeError.
Selection resolve(config::Config& cfg, Registry& registry);

// The [parallel] degrees that decide which parallel slots a job fills. [parallel] is read above
// the loader (cli::slot_degrees), so the caller hands them in.
struct SlotDegrees {
  int tp = 1, pp = 1, ep = 1, cp = 1;
};
// A note for each parallel slot whose plugin is named while its degree is 1, where it does
// nothing ("[plugins] pipeline = \"1f1b\" does nothing at [parallel] pp = 1 ...").
std::vector<std::string> idle_slots(const config::Config& cfg, const SlotDegrees& degrees);

// The runtime's defaults for slots a config leaves empty, as --set overrides: a job of several
// ranks talks over gloo and reduces gradients with ddp; tp > 1 uses the tp plugin, pp > 1 the
// 1f1b schedule, ep > 1 the ep plugin and cp > 1 the cp plugin (ring attention).
std::vector<std::string> default_plugins(const config::Config& cfg, int world,
                                         const SlotDegrees& degrees);

// Checks a plugin's [plugins.<name>] table against its schema and rules (filling defaults), then
// runs its validate hook; returns the keys. Throws ConfigError naming the key.
std::vector<config::KeySpec> check_options(config::Config& cfg, const loom_plugin* desc);

// The option table the ABI hands to a plugin's create().
loom_options options_for(const config::Config& cfg, const std::string& plugin);

// The registry and config that loom.plugins creates wrapped plugins from (both outlive the run).
void set_plugin_source(Registry* registry, config::Config* cfg);

}  // namespace loom::plugins
