// loom train FILE [--set k=v]... [--run-dir DIR]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "ckpt/checkpoint_settings.hpp"
#include "cli/job_config.hpp"
#include "cli/parse.hpp"
#include "core/json.hpp"
#include "distributed/elastic.hpp"
#include "distributed/launch.hpp"
#include "distributed/mesh.hpp"
#include "distributed/node_groups.hpp"
#include "distributed/parallel_settings.hpp"
#include "loader/plugin_settings.hpp"
#include "loader/selection.hpp"
#include "plan/calibration.hpp"
#include "plan/estimate.hpp"
#include "plan/from_config.hpp"
#include "plan/mixed.hpp"
#include "report/noise.hpp"
#include "train/data_check.hpp"
#include "train/layout_rules.hpp"
#include "train/metrics.hpp"
#include "train/run_dir.hpp"
#include "train/settings.hpp"
#include "train/trainer.hpp"

namespace loom::cli {

int launch(const Args& args) {
  po::options_description opts("loom launch");
  opts.add_options()("nproc,n", po::value<int>()->required(), "ranks to start (on this node)")(
      "program", po::value<std::vector<std::string>>()->required(), "program and its arguments");
  add_node_options(opts);
  po::positional_options_description pos;
  pos.add("program", -1);
  po::variables_map vm;
  if (!parse(args, "loom launch --nproc N [--nnodes M --node-rank K] -- PROGRAM [ARGS...]", opts,
             pos, vm))
    return kExitOk;
  int n = vm["nproc"].as<int>();
  if (n < 1) throw UsageError("--nproc must be at least 1");
  return dist::spawn_node(node_spec(vm, n), vm["program"].as<std::vector<std::string>>());
}

namespace {

std::filesystem::path run_dir_of(const po::variables_map& vm, const train::JobSettings& job) {
  return vm.count("run-dir") ? std::filesystem::path(vm["run-dir"].as<std::string>())
                             : train::default_run_dir(job);
}

// No outer launcher: this process becomes the local launcher of nproc ranks (elastic when
// asked). The config is checked here first, so a bad one fails once, not once per rank.
int launch_job(const po::variables_map& vm, const Job& job, const dist::NodeSpec& node, int world) {
  const train::JobSettings& s = job.settings;
  train::check_layout(s, job.selection, dist::resolve_mesh(s.parallel, world));
  train::check_data(s);  // once here for the ranks it starts
  // One lock per job: other nodes may see the same directory over a shared filesystem.
  if (node.node_rank == 0) train::claim_run_dir(run_dir_of(vm, s), s.checkpoint);
  ::setenv("LOOM_RUN_DIR_LOCKED", "1", 1);  // the ranks share this process's lock
  const int max_restarts = vm["max-restarts"].as<int>();
  const int min_nodes = vm.count("min-nodes") ? vm["min-nodes"].as<int>() : node.nnodes;
  if (max_restarts < 0) throw UsageError("--max-restarts must be at least 0");
  if (min_nodes < 1 || min_nodes > node.nnodes)
    throw UsageError("--min-nodes " + std::to_string(min_nodes) + " is not in [1, --nnodes " +
                     std::to_string(node.nnodes) + "]");
  if (max_restarts == 0) return dist::spawn_node(node, self_invocation());
  dist::ElasticSpec elastic{node, max_restarts, min_nodes};
  elastic.run_dir = run_dir_of(vm, s);
  return dist::run_elastic(elastic, self_invocation());
}

// [run] plan_cluster: loom plan's prediction for this run, said before it starts (a bad cluster
// file fails it at once) and put beside what it measured once it ends.
// A cluster file that cannot be read fails the run; a layout the planner cannot cost only loses
// the prediction (the run's own checks come next, and say what is wrong with it).
std::optional<plan::Estimate> predicted(const train::JobSettings& job, int world) {
  const std::string file = job.run.plan_cluster;
  if (file.empty()) return std::nullopt;
  // A mixed cluster ([[group]]s) is costed stage by stage on the config's [parallel] groups.
  std::optional<plan::Cluster> c;
  std::optional<plan::MixedCluster> mixed;
  if (plan::has_groups(file))
    mixed = plan::load_mixed_cluster(file);
  else
    c = plan::load_cluster(file);
  const std::string name = mixed ? mixed->name : c->name;
  plan::Estimate e;
  try {
    e = mixed ? plan::summary_of(plan::predict_mixed(*mixed, job, world))
              : plan::predict(*c, job, world);
  } catch (const std::exception& err) {
    std::printf("plan: no prediction for this run on '%s': %s\n", name.c_str(), err.what());
    return std::nullopt;
  }
  std::printf("plan: %s on '%s' (%s): predicted %.1f ms per step", e.layout.name().c_str(),
              name.c_str(), file.c_str(), e.step_ms);
  if (e.band_high_ms > 0)
    std::printf(" (measured runs there: %.1f to %.1f)", e.band_low_ms, e.band_high_ms);
  std::printf(", exposed communication %.1f%%, peak %.3f GiB per rank\n",
              100 * e.exposed_comm_ms / e.step_ms, e.memory.total() / double(1ull << 30));
  if (!e.extrapolated.empty()) std::printf("plan: extrapolated: %s\n", e.extrapolated.c_str());
  return e;
}

// The steps after the first (it pays for warm-up) beside the prediction: the fastest, as
// calibration and bench/plan_accuracy.sh read a run (neighbours only add time), and the median;
// also RUN_DIR/plan.json, for tools.
void print_beside(const plan::Estimate& e, const train::TrainSummary& s,
                  const std::filesystem::path& run_dir) {
  const size_t skip = s.step_ms.size() > 1 ? 1 : 0;
  const std::vector<double> steps(s.step_ms.begin() + skip, s.step_ms.end()),
      exposed(s.exposed_comm_ms.begin() + skip, s.exposed_comm_ms.end());
  const double step = *std::min_element(steps.begin(), steps.end()),
               middle = report::spread(steps).median;
  const double share = middle > 0 ? report::spread(exposed).median / middle : 0;
  const double predicted_share = e.exposed_comm_ms / e.step_ms, gib = double(1ull << 30);
  std::printf(
      "plan vs measured: step %.1f ms predicted, %.1f ms measured (the fastest of %zu step%s, "
      "%+.1f%%; median %.1f); "
      "exposed communication %.1f%% predicted, %.1f%% measured; peak memory %.3f GiB predicted, "
      "%.3f GiB measured\n",
      e.step_ms, step, steps.size(), steps.size() == 1 ? "" : "s", 100 * (step / e.step_ms - 1),
      middle, 100 * predicted_share, 100 * share, e.memory.total() / gib, s.peak_mem_bytes / gib);
  train::write_checked(run_dir / "plan.json",
                       "{\"layout\": " + json_quote(e.layout.name()) + ", \"predicted_step_ms\": " +
                           json_number(e.step_ms) + ", \"measured_step_ms\": " + json_number(step) +
                           ", \"median_step_ms\": " + json_number(middle) +
                           ", \"predicted_exposed_comm_share\": " + json_number(predicted_share) +
                           ", \"measured_exposed_comm_share\": " + json_number(share) +
                           ", \"predicted_peak_mem_bytes\": " + json_number(e.memory.total()) +
                           ", \"measured_peak_mem_bytes\": " + json_number(s.peak_mem_bytes) +
                           ", \"extrapolated\": " + json_quote(e.extrapolated) + "}\n");
}

// What the run did, on one line: its steps (those of this run, after a resume), its losses, its
// speed, where its metrics are, and what it saved, or that it saved nothing, which a newcomer
// would otherwise learn only from `loom eval` finding no checkpoint.
std::string done_line(const train::TrainSummary& s, const ckpt::CheckpointSettings& c,
                      const std::filesystem::path& run_dir) {
  char b[512];
  std::string out = "done: ";
  if (s.first_step > 1)
    std::snprintf(b, sizeof b, "steps %lld-%lld (%lld, resumed after step %lld)",
                  (long long)s.first_step, (long long)s.last_step, (long long)s.steps,
                  (long long)(s.first_step - 1));
  else
    std::snprintf(b, sizeof b, "%lld steps", (long long)s.steps);
  out += b;
  std::snprintf(b, sizeof b, ", train loss %.4f -> %.4f", s.first_loss, s.final_loss);
  out += b;
  if (s.evaluations == 1)
    std::snprintf(b, sizeof b, ", val loss %.4f (one evaluation)", s.final_val_loss);
  else if (s.evaluations > 1)
    std::snprintf(b, sizeof b, ", val loss %.4f -> %.4f", s.first_val_loss, s.final_val_loss);
  out += s.evaluations > 0 ? b : "";
  std::snprintf(b, sizeof b, ", %.0f tokens/s, MFU %.1f%%; metrics in %s", s.tokens_per_s,
                s.mfu * 100, (run_dir / "metrics.jsonl").c_str());
  out += b;
  const std::filesystem::path root =
      c.dir.empty() ? run_dir / "checkpoints" : std::filesystem::path(c.dir);
  if (s.last_saved_step > 0)
    return out + "; checkpoint of step " + std::to_string(s.last_saved_step) + " in " +
           root.string();
  return out + "; nothing saved" +
         (c.every == 0
              ? std::string(" ([checkpoint] every = 0): loom eval, generate and export have no "
                            "checkpoint to read; set "
                            "[checkpoint] every = N with [plugins] ckpt = \"sync\"")
              : std::string(": no step of this run was due a checkpoint ([checkpoint] every = ") +
                    std::to_string(c.every) + ")");
}

// This process is one rank of the job: train, then say how it ended.
int run_rank(const po::variables_map& vm, const Job& job, const dist::RankEnv& rank) {
  const train::JobSettings& settings = job.settings;
  const std::filesystem::path run_dir = run_dir_of(vm, settings);
  const std::optional<plan::Estimate> plan =
      rank.rank == 0 ? predicted(settings, rank.world) : std::nullopt;
  train::TrainSummary s = train::train(settings, job.selection, rank, run_dir);
  if (!s.stopped_by.empty()) {
    if (rank.rank == 0)
      std::printf(
          "stopped by %s after step %lld%s\n", s.stopped_by.c_str(), (long long)s.last_step,
          s.saved_on_stop ? "; its checkpoint is saved: resume with --set checkpoint.resume=latest"
          : settings.checkpoint.every == 0 ? "; nothing saved ([checkpoint] every = 0)"
                                           : "; nothing saved ([checkpoint] on_signal = \"exit\")");
    return kExitStopped;
  }
  if (rank.rank != 0 || s.steps == 0) return kExitOk;  // nothing was left to train: said already
  std::printf("%s\n", done_line(s, settings.checkpoint, run_dir).c_str());
  if (plan) print_beside(*plan, s, run_dir);
  return kExitOk;
}

}  // namespace

int train(const Args& args) {
  po::options_description opts("loom train");
  add_set_option(opts);
  opts.add_options()("run-dir", po::value<std::string>(), "where metrics and outputs go")(
      "file", po::value<std::string>()->required(), "config file (TOML)")(
      "max-restarts", po::value<int>()->default_value(0),
      "restart the job this many times after a failure, from the latest checkpoint")(
      "min-nodes", po::value<int>(),
      "an elastic restart goes on with at least this many nodes (default: --nnodes)");
  add_node_options(opts);
  po::positional_options_description pos;
  pos.add("file", 1);
  po::variables_map vm;
  if (!parse(
          args,
          "loom train FILE [--set section.key=value]... [--run-dir DIR] [--nnodes M --node-rank K]",
          opts, pos, vm))
    return kExitOk;
  const std::string file = vm["file"].as<std::string>();
  config::Config cfg = config::Config::load(file, sets(vm));
  cfg.validate(train::job_sections());
  const int nproc = dist::read_parallel(cfg.section("parallel")).nproc;
  const dist::NodeSpec node = node_spec(vm, nproc);
  std::optional<dist::RankEnv> env = dist::rank_from_environment();
  // A launcher that started a single task (an sbatch step, `srun -n1`) leaves the spawning to us.
  const bool spawn = (!env || env->world == 1) && nproc * node.nnodes > 1;
  cfg = load_for_job(file, sets(vm), spawn ? nproc * node.nnodes : env ? env->world : 1);
  if (!env || env->rank == 0)  // once per job
    for (const std::string& n : plugins::idle_slots(cfg, slot_degrees(cfg)))
      std::fprintf(stderr, "loom: note: %s\n", n.c_str());
  if (spawn) {
    const std::unique_ptr<Job> job = open_job(std::move(cfg));
    check_writer(*job);
    return launch_job(vm, *job, node, nproc * node.nnodes);
  }
  const dist::RankEnv rank = env.value_or(dist::RankEnv{});
  for (const std::string& set : place_in_group(cfg, rank)) cfg.apply_set(set);
  const std::unique_ptr<Job> job = open_job(std::move(cfg));
  check_writer(*job);
  return run_rank(vm, *job, rank);
}

}  // namespace loom::cli
