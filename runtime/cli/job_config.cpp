#include "cli/job_config.hpp"

#include <cstdio>

#include "core/errors.hpp"
#include "distributed/node_groups.hpp"
#include "distributed/parallel_settings.hpp"
#include "loader/plugin_settings.hpp"
#include "train/job_settings.hpp"

namespace loom::cli {

plugins::SlotDegrees slot_degrees(const config::Config& cfg) {
  const dist::ParallelSettings p = dist::read_parallel(cfg.section("parallel"));
  return {p.tp, p.pp, p.ep, p.cp};
}

config::Config load_for_job(const std::string& file, std::vector<std::string> sets, int world) {
  config::Config cfg = config::Config::load(file, sets);
  cfg.validate(train::job_sections());
  const std::vector<std::string> defaults = plugins::default_plugins(cfg, world, slot_degrees(cfg));
  if (defaults.empty()) return cfg;
  sets.insert(sets.end(), defaults.begin(), defaults.end());
  cfg = config::Config::load(file, sets);
  cfg.validate(train::job_sections());
  return cfg;
}

std::vector<std::string> place_in_group(const config::Config& cfg, const dist::RankEnv& rank) {
  const dist::ParallelSettings par = dist::read_parallel(cfg.section("parallel"));
  const std::vector<dist::NodeGroup> groups = dist::read_groups(cfg.section("parallel"));
  if (groups.empty()) return {};
  if (rank.launcher == "slurm")
    dist::check_het_components(groups, par.nproc);  // not a local launch inside a het allocation
  if (rank.rank == 0 && rank.world % par.pp == 0)
    std::printf("groups: %s\n",
                dist::describe_groups(groups, par.nproc, rank.world, par.pp).c_str());
  return dist::group_overrides(groups, par.nproc, rank.rank);
}

void check_writer(const Job& job) {
  const int64_t every = job.settings.checkpoint.every;
  if (every == 0 || job.selection.slot("ckpt")) return;
  std::string writers;
  for (const plugins::Found& f : job.registry->all())
    if (f.desc->kind == LOOM_KIND_CKPT)
      writers += std::string(writers.empty() ? "" : ", ") + "\"" + f.desc->name + "\"";
  const toml::node* at = job.cfg.table().at_path("checkpoint.every").node();
  throw ConfigError((at ? config::where(*at) + ": " : std::string()) +
                    "[checkpoint] every = " + std::to_string(every) +
                    " needs a checkpoint writer: set [plugins] ckpt to one of " +
                    (writers.empty() ? "(none found on the plugin path)" : writers) +
                    " (or set every = 0 to save nothing); `loom plugins` lists every writer on "
                    "the plugin path, third-party ones included");
}

std::unique_ptr<Job> open_job(config::Config cfg) {
  auto job = std::make_unique<Job>();
  job->cfg = std::move(cfg);
  const plugins::PluginSettings slots = plugins::read_plugins(job->cfg.section("plugins"));
  job->registry = std::make_unique<plugins::Registry>(plugins::Registry::default_dirs(slots.path));
  plugins::set_plugin_source(job->registry.get(), &job->cfg);
  job->selection = plugins::resolve(job->cfg, *job->registry);
  job->settings = train::read_job(job->cfg, job->selection);
  return job;
}

}  // namespace loom::cli
