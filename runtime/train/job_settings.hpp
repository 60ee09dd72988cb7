// Every section a training job reads, read once into typed settings: the settings assembly.
// Each section is declared beside the component that owns it (its *_section() and read_*()
// functions); read_job calls them in one place, so no component below it sees the raw config.
#pragma once

#include <string>
#include <vector>

#include "ckpt/checkpoint_settings.hpp"
#include "config/config.hpp"
#include "data/data_settings.hpp"
#include "distributed/node_groups.hpp"
#include "distributed/parallel_settings.hpp"
#include "loader/plugin_settings.hpp"
#include "loader/selection.hpp"
#include "model/config.hpp"
#include "train/settings.hpp"

namespace loom::train {

struct JobSettings {
  RunSettings run;
  Settings train;  // accum is 0 here: settle_layout fills it once the mesh is known
  StabilitySettings stability;
  Faults faults;
  PlanSettings plan;
  model::Config model;
  std::string init_from;  // [model] init_from: "" = weights from the seed
  dist::ParallelSettings parallel;
  std::vector<dist::NodeGroup> groups;
  data::DataSettings data;
  ckpt::CheckpointSettings checkpoint;
  plugins::PluginSettings plugins;
  std::string name;  // the config's stem: "demo" for configs/demo.toml
  std::string text;  // the resolved config as TOML, each chosen plugin's table included
};

// Every section a job's config may hold, in the order `loom config show` prints them.
const std::vector<config::SectionSpec>& job_sections();

// Reads a validated config. Throws ConfigError naming the key of the first section that refuses.
// Without a selection (the planner resolves no plugins), `text` stays empty.
JobSettings read_job(const config::Config& cfg);
// The same for a config whose plugins `selection` resolved, `text` included.
JobSettings read_job(const config::Config& cfg, const plugins::Selection& selection);

}  // namespace loom::train
