// The [plugins] section: which plugin fills each slot, where to look for them, and each plugin's
// options in [plugins.<name>]. Declared here and read here.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "config/schema.hpp"
#include "config/section.hpp"

namespace loom::plugins {

struct PluginSettings {
  std::vector<std::string> path;                 // extra directories searched first
  std::map<std::string, std::string> plugin_of;  // slot key -> plugin name; "" = none
  // [plugins] and its [plugins.<name>] option tables as TOML, for a part that configures plugins
  // by name on its own (the planner's cost entries).
  std::string tables;
  // The plugin named for a slot ("comm", "data", ..., "precision", "ckpt"); "" = none.
  std::string slot(const std::string& name) const;
};
PluginSettings read_plugins(const config::Section& plugins);
config::SectionSpec plugins_section();

}  // namespace loom::plugins
