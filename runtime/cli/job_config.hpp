// A job's config as the commands hand it down: loaded, checked against every section
// (cli/sections.hpp) and completed with the plugins its layout needs.
#pragma once

#include <string>
#include <vector>

#include "cli/sections.hpp"
#include "config/config.hpp"
#include "loader/selection.hpp"

namespace loom::cli {

// [parallel]'s degrees, which decide the plugins a job gets by default.
plugins::SlotDegrees slot_degrees(const config::Config& cfg);

// The config a job of `world` ranks runs: the file and the --set overrides, checked, then the
// runtime's defaults for the slots they leave empty (plugins::default_plugins). `loom train`,
// `loom config check` and `loom plan --emit` all read it so.
config::Config load_for_job(const std::string& file, std::vector<std::string> sets, int world);

}  // namespace loom::cli
