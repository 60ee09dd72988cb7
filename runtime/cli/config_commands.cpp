// loom config check FILE, loom config show FILE
#include <cstdio>
#include <iostream>

#include "cli/job_config.hpp"
#include "cli/parse.hpp"
#include "distributed/mesh.hpp"
#include "distributed/node_groups.hpp"
#include "distributed/parallel_settings.hpp"
#include "loader/plugin_settings.hpp"
#include "loader/selection.hpp"
#include "model/model.hpp"
#include "plan/cluster.hpp"
#include "plan/mixed_cluster.hpp"
#include "train/data_check.hpp"
#include "train/layout_rules.hpp"
#include "train/trainer.hpp"

namespace loom::cli {

int config(const Args& args) {
  po::options_description opts("loom config");
  add_set_option(opts);
  opts.add_options()("action", po::value<std::string>()->required(), "check | show")(
      "file", po::value<std::string>()->required(), "config file (TOML)")(
      "no-data", po::bool_switch(),
      "check: the config alone, without its data (a config written before its data is prepared)");
  po::positional_options_description pos;
  pos.add("action", 1).add("file", 1);
  po::variables_map vm;
  if (!parse(args, "loom config (check | show) FILE [--set section.key=value]... [--no-data]", opts,
             pos, vm))
    return kExitOk;
  std::string action = vm["action"].as<std::string>();
  if (action != "check" && action != "show")
    throw UsageError("unknown action '" + action + "': expected 'check' or 'show'");

  // A cluster description (clusters/*.toml, for loom plan) is checked against its own schema.
  if (plan::is_cluster_file(vm["file"].as<std::string>())) {
    if (!sets(vm).empty()) throw UsageError("--set applies to training configs, not cluster files");
    if (plan::has_groups(vm["file"].as<std::string>())) {
      const plan::MixedCluster m = plan::load_mixed_cluster(vm["file"].as<std::string>());
      std::cout << m.source << ": ok; mixed cluster '" << m.name << "': " << m.describe() << "\n";
      return kExitOk;
    }
    const plan::Cluster c = plan::load_cluster(vm["file"].as<std::string>());
    std::cout << c.source << ": ok; cluster '" << c.name << "': " << c.nodes << " x " << c.per_node
              << " " << c.device << ", " << c.peak(c.peak_bf16 > 0 ? "bf16" : "fp32") / 1e12
              << " TFLOP/s each\n";
    return kExitOk;
  }
  config::Config cfg = config::Config::load(vm["file"].as<std::string>(), sets(vm));
  cfg.validate(train::job_sections());
  // As `loom train` would run it: [parallel] nproc ranks (on each of its groups' nodes), the
  // runtime's default plugins, and every check a rank makes before its first step.
  const std::vector<dist::NodeGroup> groups = dist::read_groups(cfg.section("parallel"));
  const dist::ParallelSettings par = dist::read_parallel(cfg.section("parallel"));
  const int world = dist::groups_world(groups, par.nproc);
  if (action == "check") {
    cfg = load_for_job(vm["file"].as<std::string>(), sets(vm), world);
    for (const std::string& n : plugins::idle_slots(cfg, slot_degrees(cfg)))
      std::fprintf(stderr, "loom: note: %s\n", n.c_str());
  }
  // A wrapper's validate hook checks the plugin it wraps (open_job sets the plugin source).
  const std::unique_ptr<Job> job = open_job(std::move(cfg));
  const plugins::Selection& sel = job->selection;
  const train::JobSettings& settings = job->settings;
  if (action == "check") {
    check_writer(*job);
    train::check_layout(settings, sel, dist::resolve_mesh(settings.parallel, world));
    if (!vm["no-data"].as<bool>()) train::check_data(settings);  // as train does before step 1
  }
  if (action == "show") {
    const model::Config& m = settings.model;
    std::cout << "# model: " << m.describe() << "\n# " << m.params() << " params ("
              << m.non_embedding_params() << " non-embedding), " << m.flops_per_token()
              << " FLOPs/token; loom model info FILE for more\n";
    std::cout << settings.text;
    return kExitOk;
  }
  std::cout << job->cfg.source() << ": ok";
  for (const auto& s : sel.slots) std::cout << "; " << s.slot << " = " << s.found.desc->name;
  std::cout << "\n";
  if (!groups.empty())
    std::cout << "groups: " << dist::describe_groups(groups, par.nproc, world, par.pp) << "\n";
  return kExitOk;
}

}  // namespace loom::cli
