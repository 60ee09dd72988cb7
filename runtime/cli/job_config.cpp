#include "cli/job_config.hpp"

#include "cli/sections.hpp"
#include "distributed/parallel_settings.hpp"

namespace loom::cli {

plugins::SlotDegrees slot_degrees(const config::Config& cfg) {
  const dist::ParallelSettings p = dist::read_parallel(cfg);
  return {p.tp, p.pp, p.ep, p.cp};
}

config::Config load_for_job(const std::string& file, std::vector<std::string> sets, int world) {
  config::Config cfg = config::Config::load(file, sets);
  cfg.validate(runtime_schema());
  const std::vector<std::string> defaults = plugins::default_plugins(cfg, world, slot_degrees(cfg));
  if (defaults.empty()) return cfg;
  sets.insert(sets.end(), defaults.begin(), defaults.end());
  cfg = config::Config::load(file, sets);
  cfg.validate(runtime_schema());
  return cfg;
}

}  // namespace loom::cli
