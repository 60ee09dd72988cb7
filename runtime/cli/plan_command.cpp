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
#include "train/layout_rules.hpp"

namespace loom::cli {

int plan_calibrate(const Args& args);

namespace {

int published(const Args& args) {
  po::options_description opts("loom plan published");
  opts.add_options()("clusters", po::value<std::string>()->default_value("clusters"),
                     "directory of cluster files")("json", po::bool_switch(),
                                                   "one JSON object per run");
  po::variables_map vm;
  if (!parse(args, "loom plan published [--clusters DIR] [--json]", opts, {}, vm)) return kExitOk;
  const bool json = vm["json"].as<bool>();
  int run_w = 26, cluster_w = 10,
      layout_w = 40;  // grown to the longest entry, so the columns stay in line
  for (const auto& run : plan::published_runs()) {
    run_w = std::max(run_w, static_cast<int>(run.name.size())),
    layout_w = std::max(layout_w, static_cast<int>(run.layout.name().size()));
    cluster_w = std::max(cluster_w, static_cast<int>(run.cluster.size()));
  }
  if (!json)
    std::printf("%-*s %-*s %-*s %12s %12s %8s %14s\n", run_w, "run", cluster_w, "cluster", layout_w,
                "layout", "published", "predicted", "error", "mem GiB / dev");
  double worst = 0;
  std::vector<double> errors;
  int fit = 0;
  std::map<std::string, plan::Cluster> clusters;
  for (const auto& run : plan::published_runs()) {
    if (!clusters.count(run.cluster))
      clusters.emplace(run.cluster,
                       plan::load_cluster(std::filesystem::path(vm["clusters"].as<std::string>()) /
                                          (run.cluster + ".toml")));
    const plan::Cluster& c = clusters.at(run.cluster);
    plan::PluginSources sources = plan::published_sources(run);
    const plan::Estimate e =
        plan::estimate(c, run.workload, run.layout, sources.costs(), sources.pipes());
    const double p = plan::predicted_metric(run, e), err = p / run.published - 1;
    if (run.source.find("Table 1") != std::string::npos) worst = std::max(worst, std::fabs(err));
    errors.push_back(std::fabs(err));
    fit += e.memory.total() <= c.memory;  // they ran: their memory must fit the device
    auto show = [&](double v) {
      char b[32];
      if (run.metric == "mfu")
        std::snprintf(b, sizeof b, "%.1f%% MFU", 100 * v);
      else if (run.metric == "tflops")
        std::snprintf(b, sizeof b, "%.1f TF/s", v);
      else
        std::snprintf(b, sizeof b, "%.0f tok/s", v);
      return std::string(b);
    };
    if (json) {
      nlohmann::ordered_json j;
      j["run"] = run.name, j["source"] = run.source, j["cluster"] = run.cluster,
      j["layout"] = run.layout.name();
      j["metric"] = run.metric, j["published"] = run.published, j["predicted"] = p,
      j["error"] = err;
      j["predicted_mem_bytes"] = e.memory.total(), j["device_mem_bytes"] = c.memory;
      std::printf("%s\n", json_line(j).c_str());
    } else
      std::printf("%-*s %-*s %-*s %12s %12s %+7.1f%% %8.1f / %3.0f\n", run_w, run.name.c_str(),
                  cluster_w, run.cluster.c_str(), layout_w, run.layout.name().c_str(),
                  show(run.published).c_str(), show(p).c_str(), 100 * err,
                  e.memory.total() / double(1ull << 30), c.memory / double(1ull << 30));
  }
  if (json) return kExitOk;
  std::sort(errors.begin(), errors.end());
  const long within =
      std::count_if(errors.begin(), errors.end(), [](double e) { return e <= 0.15; });
  std::printf("\nNarayanan et al. 2021 Table 1: largest error %.1f%% (target 15%%)\n", 100 * worst);
  std::printf(
      "all %zu runs: median |error| %.1f%% (target 10%%), %ld within 15%%; predicted memory within "
      "the device for %d\n",
      errors.size(), 100 * errors[errors.size() / 2], within, fit);
  return kExitOk;
}

// --emit: the config with the row's overrides, as `loom config check` and `loom train` read it,
// checked by the same check before it is written under its head.
void write_emitted(const PlanOptions& o, const Emitted& e) {
  const std::string& file = o.file;
  const int world = e.world;
  const std::unique_ptr<Job> job = open_job(load_for_job(file, e.overrides, world));
  const train::JobSettings& settings = job->settings;
  train::check_layout(settings, job->selection, dist::resolve_mesh(settings.parallel, world));
  std::string head = "# Written by `loom plan " + file + " --cluster " + o.cluster + " --emit \"" +
                     *o.emit + "\"` (its --set overrides included): " + e.head;
  head += "# Check it with `loom config check`, run it with `loom train`.\n\n";
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
  return overrides;
}

int plan_cmd(const Args& args) {
  if (!args.empty() && args[0] == "calibrate")
    return plan_calibrate(Args(args.begin() + 1, args.end()));
  if (!args.empty() && args[0] == "published") return published(Args(args.begin() + 1, args.end()));
  const std::optional<PlanOptions> o = plan_options(args);
  if (!o) return kExitOk;
  config::Config cfg = config::Config::load(o->file, o->sets);
  cfg.validate(train::job_sections());
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
    write_emitted(*o, ranking->emitted(ranking->row("emit", *o->emit)));
  } else if (o->json) {
    for (size_t i = 0; i < ranking->size(); ++i)
      std::printf("%s\n", json_line(ranking->json(i)).c_str());
  } else {
    ranking->table(size_t(o->top));
  }
  return kExitOk;
}

}  // namespace loom::cli
