// The [plugins] section: which plugin fills each slot, where to look for them, and each plugin's
// options in [plugins.<name>]. Declared here and read here.
#pragma once

#include <string>
#include <vector>

#include "config/config.hpp"
#include "config/schema.hpp"

namespace loom::plugins {

struct PluginSettings {
  std::vector<std::string> path;  // extra directories searched first
  const config::Config* cfg = nullptr;
  // The plugin named for a slot ("comm", "data", ..., "precision", "ckpt"); "" = none.
  std::string slot(const std::string& name) const;
};
PluginSettings read_plugins(const config::Config& cfg);
config::SectionSpec plugins_section();

}  // namespace loom::plugins
