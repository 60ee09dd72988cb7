// loom plan CONFIG --cluster FILE [--nodes N | --devices N] [--top K] [--fix k=v] [--explain L]
// [--emit R --out F] [--json] loom plan published [--clusters DIR] [--json] loom plan calibrate
// --out FILE            (plan_calibrate.cpp) Predicts step time, MFU and memory of every layout
// before anyone rents the cluster. The options are parsed here; the ranking (plan_uniform.cpp,
// plan_mixed.cpp) is written out by one writer each for --explain, --emit, --json and the table.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>

#include "cli/job_config.hpp"
#include "cli/parse.hpp"
#include "cli/plan_ranking.hpp"
#include "config/config.hpp"
#include "core/errors.hpp"
#include "core/json_line.hpp"
#include "distributed/mesh.hpp"
#include "loader/plugin_settings.hpp"
#include "loader/registry.hpp"
#include "loader/selection.hpp"
#include "plan/from_config.hpp"
#include "plan/mixed_cluster.hpp"
#include "plan/published.hpp"
#include "plan/sources.hpp"
#include "train/data_check.hpp"
#include "train/layout_rules.hpp"

namespace loom::cli {

int plan_calibrate(const Args& args);
int plan_published(const Args& args);

namespace {

// For a GPU cluster, not this machine: checkpointing on where the config planned (`job`) has
// none, a data directory to fill in where it names none of its own (train refuses it until it is
// filled in), and a timeout that rendezvous over many nodes fits in.
std::vector<std::string> cluster_overrides(const train::JobSettings& job, bool own_data,
                                           const Emitted& e, std::string& head) {
  std::vector<std::string> out = e.overrides;
  if (e.device == "cpu" || e.device == "strict") return out;
  if (job.checkpoint.every == 0) {
    out.push_back("checkpoint.every=500");
    head +=
        "# Checkpoints every 500 steps ([checkpoint] every): set it to the steps you can lose.\n";
  }
  if (job.plugins.slot("ckpt").empty()) out.push_back("plugins.ckpt=\"async\"");
  if (!own_data) {
    out.push_back("data.dir=\"" + std::string(train::kDataPlaceholder) + "\"");
    head +=
        "# Fill in [data] dir: token shards for this model's tokenizer (loom data prepare);\n"
        "# `loom config check` and `loom train` refuse the placeholder.\n";
  }
  if (job.parallel.timeout_s < 600) {
    out.push_back("parallel.timeout_s=600");
    head += "# timeout_s 600: rendezvous and first collectives over many nodes take minutes.\n";
  }
  return out;
}

// --emit: the config with the row's overrides, as `loom config check` and `loom train` read it,
// checked by the same check before it is written under its head.
void write_emitted(const PlanOptions& o, const train::JobSettings& planned, bool own_data,
                   const Emitted& e) {
  const std::string& file = o.file;
  const int world = e.world;
  std::string notes;
  const std::vector<std::string> overrides = cluster_overrides(planned, own_data, e, notes);
  const std::unique_ptr<Job> job = open_job(load_for_job(file, overrides, world));
  check_writer(*job);  // what train would refuse is not written
  const train::JobSettings& settings = job->settings;
  train::check_layout(settings, job->selection, dist::resolve_mesh(settings.parallel, world));
  std::string head = "# Written by `loom plan " + file + " --cluster " + o.cluster + " --emit \"" +
                     *o.emit + "\"` (its --set overrides included): " + e.head;
  head += notes + "# Check it with `loom config check`, run it with `loom train`.\n\n";
  const std::string& out = *o.out;
  std::ofstream f(out);
  f << head << settings.text;
  if (!f.flush()) throw RuntimeError("cannot write " + out);
  std::printf("wrote %s: %s (%d ranks); loom train %s\n", out.c_str(), e.layout.name().c_str(),
              world, out.c_str());
}

// loom plan's options, parsed once.
std::optional<PlanOptions> plan_options(const Args& args) {
  po::options_description opts("loom plan");
  opts.add_options()("file", po::value<std::string>()->required(),
                     "the training config (model, batch, precision)")(
      "cluster", po::value<std::string>()->required(), "cluster file (clusters/*.toml)")(
      "nodes", po::value<int>(),
      "nodes to plan for (default: one node, or [parallel] nproc on a CPU machine)")(
      "devices", po::value<int>(), "devices to plan for, instead of --nodes")(
      "top", ranged<int>("top", 1, 1000000)->default_value(10), "rows of the ranked table")(
      "fix", po::value<std::vector<std::string>>()->composing(),
      "keep a choice fixed: tp=8, zero=1, recompute=full, "
      "schedule=1f1b, mb=2, sp=on, chunks=3 (repeatable, or comma-separated)")(
      "explain", po::value<std::string>(),
      "break one layout's step down: a layout (\"dp4 tp2 zero1 mb2\") or a rank")(
      "versus", po::value<std::string>(),
      "also say where this layout (yours, or a published one) ranks, and why")(
      "emit", po::value<std::string>(),
      "write the config that runs a layout: its rank in the table (1 = the top) or the layout")(
      "out", po::value<std::string>(), "where --emit writes the config")(
      "dtype", po::value<std::string>()->default_value(""),
      "fp32 | bf16 | fp16 | fp8 (default: [plugins] precision)")(
      "json", po::bool_switch(), "every layout as one JSON object per line, ranked");
  add_set_option(opts);
  po::positional_options_description pos;
  pos.add("file", 1);
  po::variables_map vm;
  const std::string synopsis =
      "loom plan CONFIG --cluster FILE [--nodes N | --devices N] [--top K] [--fix k=v] "
      "[--explain LAYOUT|RANK] [--emit RANK|LAYOUT --out FILE] [--json]\n"
      "       loom plan calibrate --out FILE\n       loom plan published";
  if (!parse(args, synopsis, opts, pos, vm)) return std::nullopt;
  PlanOptions o;
  o.file = vm["file"].as<std::string>(), o.cluster = vm["cluster"].as<std::string>();
  if (vm.count("nodes")) o.nodes = vm["nodes"].as<int>();
  if (vm.count("devices")) o.devices = vm["devices"].as<int>();
  o.top = vm["top"].as<int>();
  if (vm.count("fix")) o.fix = vm["fix"].as<std::vector<std::string>>();
  o.sets = sets(vm);
  for (auto [key, field] : {std::pair{"explain", &o.explain},
                            {"versus", &o.versus},
                            {"emit", &o.emit},
                            {"out", &o.out}})
    if (vm.count(key)) *field = vm[key].as<std::string>();
  o.dtype = vm["dtype"].as<std::string>();
  o.json = vm["json"].as<bool>();
  return o;
}

}  // namespace

double gib(double b) { return b / double(1ull << 30); }

std::optional<size_t> table_row(const std::string& option, const std::string& what, size_t rows) {
  if (what.empty() || what.find_first_not_of("0123456789") != std::string::npos)
    return std::nullopt;
  const size_t rank = std::stoul(what);
  if (rank < 1 || rank > rows)
    throw ConfigError("--" + option + " " + what + ": the table ranks " + std::to_string(rows) +
                      " layouts");
  return rank - 1;
}

std::vector<std::string> emit_overrides(const PlanOptions& o, const plan::Workload& w,
                                        const plan::Layout& l) {
  if (!o.out) throw UsageError("--emit needs --out FILE, where the config is written");
  if (l.recompute != "none" && l.recompute != "selective" && l.recompute != "full")
    throw ConfigError("--emit: recompute '" + l.recompute +
                      "' is a published run's policy that Loom does not run");
  std::vector<std::string> overrides = o.sets;
  if (!o.dtype.empty()) overrides.push_back("plugins.precision=" + o.dtype);
  for (const std::string& s : plan::layout_sets(w, l)) overrides.push_back(s);
  overrides.push_back("run.plan_cluster=\"" + std::filesystem::absolute(o.cluster).string() + "\"");
  if (w.device != "cpu") overrides.push_back("run.device=\"" + w.device + "\"");
  if (!w.comm.empty() && l.world() > 1) overrides.push_back("plugins.comm=\"" + w.comm + "\"");
  return overrides;
}

int plan_cmd(const Args& args) {
  if (!args.empty() && args[0] == "calibrate")
    return plan_calibrate(Args(args.begin() + 1, args.end()));
  if (!args.empty() && args[0] == "published")
    return plan_published(Args(args.begin() + 1, args.end()));
  const std::optional<PlanOptions> o = plan_options(args);
  if (!o) return kExitOk;
  config::Config cfg = config::Config::load(o->file, o->sets);
  // Read before validate fills the sections in with their defaults.
  const bool published = cfg.table().contains("published");
  const bool own_data =
      bool(cfg.table().at_path("data.dir")) || bool(cfg.table().at_path("data.blend"));
  // A published run's file (configs/published/) plans as it is: [published] is the planner's.
  cfg.validate(plan::plan_sections());
  if (o->emit && published)
    throw ConfigError(o->file +
                      ": a published run's record ([published]); --emit writes a config "
                      "to train, so copy the file without that section and emit from the copy");
  const train::JobSettings job = train::read_job(cfg);
  const std::unique_ptr<Ranking> ranking =
      plan::has_groups(o->cluster) ? mixed_ranking(*o, job) : uniform_ranking(*o, job);
  if (o->explain) {
    const size_t row = ranking->row("explain", *o->explain);
    if (o->json)
      std::printf("%s\n", json_line(ranking->json(row)).c_str());
    else
      ranking->explain(row);
  } else if (o->emit) {
    write_emitted(*o, job, own_data, ranking->emitted(ranking->row("emit", *o->emit)));
  } else if (o->json) {
    for (size_t i = 0; i < ranking->size(); ++i)
      std::printf("%s\n", json_line(ranking->json(i)).c_str());
  } else {
    ranking->table(size_t(o->top));
  }
  return kExitOk;
}

}  // namespace loom::cli
