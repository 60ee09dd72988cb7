// A job's config as the commands hand it down: loaded, checked against every section
// (train::job_sections()), completed with the plugins its layout needs, its plugins resolved and
// its settings read once (train::read_job). Commands below this take the typed settings.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "distributed/rank_env.hpp"
#include "loader/registry.hpp"
#include "loader/selection.hpp"
#include "train/job_settings.hpp"

namespace loom::cli {

// [parallel]'s degrees, which decide the plugins a job gets by default.
plugins::SlotDegrees slot_degrees(const config::Config& cfg);

// The config a job of `world` ranks runs: the file and the --set overrides, checked, then the
// runtime's defaults for the slots they leave empty (plugins::default_plugins). `loom train`,
// `loom config check` and `loom plan --emit` all read it so.
config::Config load_for_job(const std::string& file, std::vector<std::string> sets, int world);

// A mixed cluster's groups ([parallel] groups): a Slurm het job's components checked against
// them, the placement said once (by rank 0), and this rank's group settings as --set overrides,
// for the config before open_job reads it.
std::vector<std::string> place_in_group(const config::Config& cfg, const dist::RankEnv& rank);

// A checked config with its plugins resolved and its settings read. The config owns the option
// tables the selection's choices point into, and the registry serves a plugin that creates the
// one it wraps (plugins::set_plugin_source): both live as long as the job.
struct Job {
  config::Config cfg;
  std::unique_ptr<plugins::Registry> registry;
  plugins::Selection selection;
  train::JobSettings settings;
};
std::unique_ptr<Job> open_job(config::Config cfg);
// [checkpoint] every = N writes through the ckpt slot: a job to train without a writer is
// refused before step 1, naming where every is set and the writers the plugin path holds
// (`config show` prints such a config all the same).
void check_writer(const Job& job);

}  // namespace loom::cli
