// The config as the commands hand it down: every component's section gathered in one list (the
// components declare them beside their code; only this top level includes them all), and a job's
// config loaded, checked against that list and completed with the plugins its layout needs.
#pragma once

#include <string>
#include <vector>

#include "config/config.hpp"
#include "loader/selection.hpp"

namespace loom::cli {

// Every section a config file may hold, in the order `loom config show` prints them.
const std::vector<config::SectionSpec>& runtime_schema();

// [parallel]'s degrees, which decide the plugins a job gets by default.
plugins::SlotDegrees slot_degrees(const config::Config& cfg);

// The config a job of `world` ranks runs: the file and the --set overrides, checked, then the
// runtime's defaults for the slots they leave empty (plugins::default_plugins). `loom train`,
// `loom config check` and `loom plan --emit` all read it so.
config::Config load_for_job(const std::string& file, std::vector<std::string> sets, int world);

}  // namespace loom::cli
