// loom train FILE [--set k=v]... [--run-dir DIR]
#include <cstdio>
#include <cstdlib>

#include "cli/parse.hpp"
#include "dist/elastic.hpp"
#include "dist/launch.hpp"
#include "dist/mesh.hpp"
#include "loader/selection.hpp"
#include "loader/services.hpp"
#include "train/trainer.hpp"
#include "train/trainer_parts.hpp"

namespace loom::cli {

int launch(const Args& args) {
  po::options_description opts("loom launch");
  opts.add_options()("nproc,n", po::value<int>()->required(), "ranks to start (on this node)")(
      "program", po::value<std::vector<std::string>>()->required(), "program and its arguments");
  add_node_options(opts);
  po::positional_options_description pos;
  pos.add("program", -1);
  po::variables_map vm;
  if (!parse(args, "loom launch --nproc N [--nnodes M --node-rank K] -- PROGRAM [ARGS...]", opts, pos, vm)) return kExitOk;
  int n = vm["nproc"].as<int>();
  if (n < 1) throw UsageError("--nproc must be at least 1");
  return dist::spawn_node(node_spec(vm, n), vm["program"].as<std::vector<std::string>>());
}

int train(const Args& args) {
  po::options_description opts("loom train");
  add_set_option(opts);
  opts.add_options()("run-dir", po::value<std::string>(), "where metrics and outputs go")(
      "file", po::value<std::string>()->required(), "config file (TOML)")(
      "max-restarts", po::value<int>()->default_value(0), "restart the job this many times after a failure, from the latest checkpoint")(
      "min-nodes", po::value<int>(), "an elastic restart goes on with at least this many nodes (default: --nnodes)");
  add_node_options(opts);
  po::positional_options_description pos;
  pos.add("file", 1);
  po::variables_map vm;
  if (!parse(args, "loom train FILE [--set section.key=value]... [--run-dir DIR] [--nnodes M --node-rank K]", opts, pos, vm))
    return kExitOk;

  const std::string file = vm["file"].as<std::string>();
  std::vector<std::string> overrides = sets(vm);
  config::Config cfg = config::Config::load(file, overrides);
  cfg.validate_runtime();
  std::optional<dist::RankEnv> env = dist::rank_from_environment();
  const int nproc = static_cast<int>(cfg.i64("parallel.nproc"));
  const dist::NodeSpec node = node_spec(vm, nproc);
  const bool spawn = (!env || env->world == 1) && nproc * node.nnodes > 1;
  // Defaults that work: several ranks talk over gloo and reduce gradients with ddp; tp uses the
  // tp plugin, pp the 1f1b schedule, ep the ep plugin and cp the cp plugin (ring attention).
  const int world = spawn ? nproc * node.nnodes : env ? env->world : 1;
  if (world > 1 && cfg.str("plugins.comm").empty()) overrides.push_back("plugins.comm=gloo");
  if (world > 1 && cfg.str("plugins.data").empty()) overrides.push_back("plugins.data=ddp");
  if (cfg.i64("parallel.tp") > 1 && cfg.str("plugins.tensor").empty())
    overrides.push_back("plugins.tensor=tp");
  if (cfg.i64("parallel.pp") > 1 && cfg.str("plugins.pipeline").empty())
    overrides.push_back("plugins.pipeline=1f1b");
  if (cfg.i64("parallel.ep") > 1 && cfg.str("plugins.expert").empty())
    overrides.push_back("plugins.expert=ep");
  if (cfg.i64("parallel.cp") > 1 && cfg.str("plugins.context").empty())
    overrides.push_back("plugins.context=cp");
  if (overrides.size() != sets(vm).size()) {
    cfg = config::Config::load(file, overrides);
    cfg.validate_runtime();
  }
  // A launcher that started a single task (an sbatch step, `srun -n1`) leaves the spawning to us.
  if (spawn) {
    // No outer launcher: this process becomes the local launcher of nproc ranks. The config is
    // checked here first, so a bad one fails once, not once per rank.
    plugins::Registry reg(plugins::Registry::default_dirs(cfg.str_list("plugins.path")));
    plugins::Selection sel = plugins::resolve(cfg, reg);
    train::check_layout(cfg, sel, dist::resolve_mesh(cfg, world));
    if (node.node_rank == 0)  // one lock per job: other nodes may see the same directory over a shared filesystem
      train::lock_run_dir(vm.count("run-dir") ? std::filesystem::path(vm["run-dir"].as<std::string>())
                                              : train::default_run_dir(cfg));
    ::setenv("LOOM_RUN_DIR_LOCKED", "1", 1);  // the ranks share this process's lock
    const int max_restarts = vm["max-restarts"].as<int>();
    const int min_nodes = vm.count("min-nodes") ? vm["min-nodes"].as<int>() : node.nnodes;
    if (max_restarts < 0) throw UsageError("--max-restarts must be at least 0");
    if (min_nodes < 1 || min_nodes > node.nnodes)
      throw UsageError("--min-nodes " + std::to_string(min_nodes) + " is not in [1, --nnodes " + std::to_string(node.nnodes) + "]");
    if (max_restarts == 0) return dist::spawn_node(node, self_invocation());
    dist::ElasticSpec elastic{node, max_restarts, min_nodes};
    elastic.run_dir = vm.count("run-dir") ? std::filesystem::path(vm["run-dir"].as<std::string>()) : train::default_run_dir(cfg);
    return dist::run_elastic(elastic, self_invocation());
  }
  dist::RankEnv rank = env.value_or(dist::RankEnv{});
  plugins::Registry reg(plugins::Registry::default_dirs(cfg.str_list("plugins.path")));
  plugins::Selection sel = plugins::resolve(cfg, reg);
  plugins::set_plugin_source(&reg, &cfg);  // a plugin that wraps another creates it from these
  std::filesystem::path run_dir =
      vm.count("run-dir") ? std::filesystem::path(vm["run-dir"].as<std::string>())
                          : train::default_run_dir(cfg);
  train::TrainSummary s = train::train(cfg, sel, rank, run_dir);
  if (!s.stopped_by.empty()) {
    if (rank.rank == 0)
      std::printf("stopped by %s after step %lld%s\n", s.stopped_by.c_str(), (long long)s.last_step,
                  s.saved_on_stop ? "; its checkpoint is saved: resume with --set checkpoint.resume=latest"
                  : cfg.i64("checkpoint.every") == 0 ? "; nothing saved ([checkpoint] every = 0)"
                                                     : "; nothing saved ([checkpoint] on_signal = \"exit\")");
    return kExitStopped;
  }
  if (rank.rank != 0 || s.steps == 0) return kExitOk;  // nothing was left to train: said already
  std::printf("done: %lld steps, train loss %.4f -> %.4f", (long long)s.steps, s.first_loss,
              s.final_loss);
  if (s.final_val_loss >= 0) std::printf(", val loss %.4f -> %.4f", s.first_val_loss, s.final_val_loss);
  std::printf(", %.0f tokens/s, MFU %.1f%%; metrics in %s\n", s.tokens_per_s, s.mfu * 100,
              (run_dir / "metrics.jsonl").c_str());
  return kExitOk;
}

}  // namespace loom::cli
