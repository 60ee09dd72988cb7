// loom plan CONFIG --cluster FILE [--nodes N | --devices N] [--top K] [--fix k=v] [--explain L] [--emit R --out F] [--json]
// loom plan published [--clusters DIR] [--json]
// loom plan calibrate --out FILE            (plan_calibrate.cpp)
// Predicts step time, MFU and memory of every layout before anyone rents the cluster.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <fstream>
#include <map>
#include <optional>

#include "cli/parse.hpp"
#include "config/config.hpp"
#include "core/errors.hpp"
#include "core/json.hpp"
#include "dist/mesh.hpp"
#include "dist/parallel_settings.hpp"
#include "loader/plugin_settings.hpp"
#include "loader/registry.hpp"
#include "loader/selection.hpp"
#include "loader/services.hpp"
#include "model/model.hpp"
#include "plan/calibration.hpp"
#include "plan/from_config.hpp"
#include "plan/mixed.hpp"
#include "plan/published.hpp"
#include "plan/search.hpp"
#include "plan/sources.hpp"
#include "train/trainer.hpp"

namespace loom::cli {

int plan_calibrate(const Args& args);

namespace {

using plan::Estimate;

double gib(double b) { return b / double(1ull << 30); }

// "-12%..+80%": where measured runs here put the step, relative to the prediction.
std::string band(const Estimate& e) {
  if (e.band_high_ms <= 0) return "none";
  char b[48];
  std::snprintf(b, sizeof b, "%+.0f%%..%+.0f%%", 100 * (e.band_low_ms / e.step_ms - 1), 100 * (e.band_high_ms / e.step_ms - 1));
  return b;
}

void print_table(const std::vector<Estimate>& rows, size_t top) {
  int width = 36;  // the layout column grows to its longest name, so the columns after it stay in line
  for (size_t i = 0; i < rows.size() && i < top; ++i) width = std::max(width, static_cast<int>(rows[i].layout.name().size()));
  std::printf("%4s  %-*s %10s %11s %6s %10s %9s %5s %8s %7s %13s %7s\n", "#", width, "layout", "step ms", "tok/s/dev", "MFU",
              "TFLOP/s/d", "mem GiB", "fits", "exp.comm", "bubble", "band", "region");
  for (size_t i = 0; i < rows.size() && i < top; ++i) {
    const Estimate& e = rows[i];
    std::printf("%4zu  %-*s %10.1f %11.1f %5.1f%% %10.2f %9.2f %5s %7.1f%% %6.1f%% %13s %7s\n", i + 1, width, e.layout.name().c_str(),
                e.step_ms, e.tokens_per_s_per_device, 100 * e.mfu, e.tflops_per_device, gib(e.memory.total()),
                e.fits ? "yes" : "no", 100 * e.exposed_comm_ms / e.step_ms, 100 * e.bubble_ms / e.step_ms, band(e).c_str(),
                e.extrapolated.empty() ? "in" : "extrap");
  }
}

// The ranking never puts an extrapolated layout first without saying so, and names the best one
// inside the calibrated region.
void print_region(const std::vector<Estimate>& rows, const plan::Calibration& cal) {
  if (cal.here.empty())
    std::printf("\nband: none, as no run was measured on this cluster (RECORD=FILE bench/plan_accuracy.sh measures some)");
  else
    std::printf("\nband: measured step time over predicted on %zu calibration run%s here", cal.here.size(), cal.here.size() == 1 ? "" : "s");
  for (const auto& p : cal.here) std::printf("%s %s %+.1f%%", &p == &cal.here.front() ? ":" : ",", p.what.c_str(), 100 * p.residual);
  std::printf("\n");
  if (rows.empty() || rows.front().extrapolated.empty()) return;
  std::printf("note: #1 %s is extrapolated: %s\n", rows.front().layout.name().c_str(), rows.front().extrapolated.c_str());
  for (size_t i = 1; i < rows.size(); ++i)
    if (rows[i].extrapolated.empty() && rows[i].fits) {
      std::printf("note: the best layout inside the calibrated region is #%zu %s, %.1f ms (%+.1f%%)\n", i + 1,
                  rows[i].layout.name().c_str(), rows[i].step_ms, 100 * (rows[i].step_ms / rows.front().step_ms - 1));
      return;
    }
  std::printf("note: no fitting layout lies inside the calibrated region\n");
}

std::string estimate_json(const Estimate& e) {
  std::string s = "{\"layout\": " + json_quote(e.layout.name());
  auto num = [&](const char* k, double v) { s += std::string(", \"") + k + "\": " + json_number(v); };
  num("dp", e.layout.dp), num("tp", e.layout.tp), num("pp", e.layout.pp), num("cp", e.layout.cp), num("ep", e.layout.ep);
  num("zero", e.layout.zero), num("micro_batch", e.layout.micro_batch), num("chunks", e.layout.chunks);
  s += ", \"sp\": " + std::string(e.layout.sp ? "true" : "false") + ", \"schedule\": " + json_quote(e.layout.schedule) +
       ", \"recompute\": " + json_quote(e.layout.recompute);
  num("step_ms", e.step_ms), num("tokens_per_s_per_device", e.tokens_per_s_per_device), num("mfu", e.mfu);
  num("tflops_per_device", e.tflops_per_device), num("peak_mem_bytes", e.memory.total());
  num("model_state_bytes", e.memory.model_states()), num("activation_bytes", e.memory.activations);
  num("comm_ms", e.comm_ms), num("exposed_comm_ms", e.exposed_comm_ms), num("bubble_ms", e.bubble_ms);
  num("optimizer_ms", e.optimizer_ms), num("band_low_ms", e.band_low_ms), num("band_high_ms", e.band_high_ms);
  s += ", \"extrapolated\": " + json_quote(e.extrapolated);
  s += ", \"fits\": " + std::string(e.fits ? "true" : "false") + ", \"why_not\": " + json_quote(e.why_not) + "}";
  return s;
}

void explain(const Estimate& e, const plan::Cluster& c) {
  std::printf("%s on %s: %d micro-batch%s of %d per step\n\n", e.layout.name().c_str(), c.name.c_str(),
              e.microbatches, e.microbatches > 1 ? "es" : "", e.layout.micro_batch);
  auto line = [&](const std::string& what, double ms) {
    std::printf("  %-58s %10.2f ms %6.1f%%\n", what.c_str(), ms, 100 * ms / e.step_ms);
  };
  line("forward (all micro-batches)", e.forward_ms);
  line("backward", e.backward_ms);
  if (e.recompute_ms > 0) line("recompute (" + e.layout.recompute + ")", e.recompute_ms);
  if (e.layout.pp > 1) line("pipeline bubble (" + e.layout.schedule + ")", e.bubble_ms);
  for (const auto& it : e.comms) {
    char what[160];
    std::snprintf(what, sizeof what, "%s: %s, %s %.3g MB x %.0f over %d (%s), exposed", it.plugin.c_str(), it.what.c_str(),
                  it.op.c_str(), it.bytes / 1e6, it.calls, it.group, it.level.c_str());
    line(what, it.exposed_ms);
    if (it.ms > it.exposed_ms) std::printf("  %-58s %10.2f ms\n", "    (of which hidden behind compute)", it.ms - it.exposed_ms);
  }
  line("optimizer (AdamW, grad norm)", e.optimizer_ms);
  if (e.overhead_ms > 0) line("per-step overhead (calibrated)", e.overhead_ms);
  std::printf("  %-58s %10.2f ms\n\n", "step", e.step_ms);
  std::printf("MFU %.1f%%, %.2f TFLOP/s and %.1f tokens/s per device\n", 100 * e.mfu, e.tflops_per_device,
              e.tokens_per_s_per_device);
  std::printf("memory per rank: parameters %.3f GiB, gradients %.3f, optimizer %.3f, activations %.3f, buffers %.3f, "
              "runtime %.3f = %.3f GiB of %.1f (%s)\n",
              gib(e.memory.params), gib(e.memory.grads), gib(e.memory.optim), gib(e.memory.activations),
              gib(e.memory.buffers), gib(e.memory.process), gib(e.memory.total()), gib(c.memory),
              e.fits ? "fits" : e.why_not.c_str());
  if (e.band_high_ms > 0) std::printf("band: measured runs here put the step between %.1f and %.1f ms\n", e.band_low_ms, e.band_high_ms);
  if (!e.extrapolated.empty()) std::printf("extrapolated: %s\n", e.extrapolated.c_str());
  for (const auto& n : e.notes) std::printf("note: %s\n", n.c_str());
}

int published(const Args& args) {
  po::options_description opts("loom plan published");
  opts.add_options()("clusters", po::value<std::string>()->default_value("clusters"), "directory of cluster files")(
      "json", po::bool_switch(), "one JSON object per run");
  po::variables_map vm;
  if (!parse(args, "loom plan published [--clusters DIR] [--json]", opts, {}, vm)) return kExitOk;
  const bool json = vm["json"].as<bool>();
  int run_w = 26, cluster_w = 10, layout_w = 40;  // grown to the longest entry, so the columns stay in line
  for (const auto& run : plan::published_runs()) {
    run_w = std::max(run_w, static_cast<int>(run.name.size())), layout_w = std::max(layout_w, static_cast<int>(run.layout.name().size()));
    cluster_w = std::max(cluster_w, static_cast<int>(run.cluster.size()));
  }
  if (!json)
    std::printf("%-*s %-*s %-*s %12s %12s %8s %14s\n", run_w, "run", cluster_w, "cluster", layout_w, "layout", "published", "predicted",
                "error", "mem GiB / dev");
  double worst = 0;
  std::vector<double> errors;
  int fit = 0;
  std::map<std::string, plan::Cluster> clusters;
  for (const auto& run : plan::published_runs()) {
    if (!clusters.count(run.cluster))
      clusters.emplace(run.cluster, plan::load_cluster(std::filesystem::path(vm["clusters"].as<std::string>()) / (run.cluster + ".toml")));
    const plan::Cluster& c = clusters.at(run.cluster);
    plan::PluginSources sources = plan::published_sources(run);
    const Estimate e = plan::estimate(c, run.workload, run.layout, sources.costs(), sources.pipes());
    const double p = plan::predicted_metric(run, e), err = p / run.published - 1;
    if (run.source.find("Table 1") != std::string::npos) worst = std::max(worst, std::fabs(err));
    errors.push_back(std::fabs(err));
    fit += e.memory.total() <= c.memory;  // they ran: their memory must fit the device
    auto show = [&](double v) {
      char b[32];
      if (run.metric == "mfu") std::snprintf(b, sizeof b, "%.1f%% MFU", 100 * v);
      else if (run.metric == "tflops") std::snprintf(b, sizeof b, "%.1f TF/s", v);
      else std::snprintf(b, sizeof b, "%.0f tok/s", v);
      return std::string(b);
    };
    if (json)
      std::printf("{\"run\": %s, \"source\": %s, \"cluster\": %s, \"layout\": %s, \"metric\": %s, \"published\": %s, "
                  "\"predicted\": %s, \"error\": %s, \"predicted_mem_bytes\": %s, \"device_mem_bytes\": %s}\n",
                  json_quote(run.name).c_str(), json_quote(run.source).c_str(), json_quote(run.cluster).c_str(),
                  json_quote(run.layout.name()).c_str(), json_quote(run.metric).c_str(), json_number(run.published).c_str(),
                  json_number(p).c_str(), json_number(err).c_str(), json_number(e.memory.total()).c_str(), json_number(c.memory).c_str());
    else
      std::printf("%-*s %-*s %-*s %12s %12s %+7.1f%% %8.1f / %3.0f\n", run_w, run.name.c_str(), cluster_w, run.cluster.c_str(), layout_w,
                  run.layout.name().c_str(), show(run.published).c_str(), show(p).c_str(), 100 * err, e.memory.total() / double(1ull << 30),
                  c.memory / double(1ull << 30));
  }
  if (json) return kExitOk;
  std::sort(errors.begin(), errors.end());
  const long within = std::count_if(errors.begin(), errors.end(), [](double e) { return e <= 0.15; });
  std::printf("\nNarayanan et al. 2021 Table 1: largest error %.1f%% (target 15%%)\n", 100 * worst);
  std::printf("all %zu runs: median |error| %.1f%% (target 10%%), %ld within 15%%; predicted memory within the device for %d\n",
              errors.size(), 100 * errors[errors.size() / 2], within, fit);
  return kExitOk;
}

// How many devices to plan: --nodes or --devices, else one node (a CPU machine: [parallel] nproc).
int devices_to_plan(const po::variables_map& vm, const plan::Cluster& c, const config::Config& cfg) {
  int64_t asked = c.shared_cores > 0 ? dist::read_parallel(cfg).nproc : c.per_node;
  if (vm.count("nodes") && vm.count("devices")) throw UsageError("give --nodes or --devices, not both");
  // In 64 bits: 300,000,000 nodes of 8 is past an int, not "less than 1".
  if (vm.count("nodes")) asked = int64_t{vm["nodes"].as<int>()} * c.per_node;
  if (vm.count("devices")) asked = vm["devices"].as<int>();
  if (asked < 1) throw UsageError("--nodes and --devices must be at least 1");
  if (asked > c.devices())
    throw ConfigError(std::to_string(asked) + " devices asked, but cluster '" + c.name + "' (" + c.source + ") has " +
                      std::to_string(c.nodes) + " node" + (c.nodes > 1 ? "s" : "") + " of " + std::to_string(c.per_node) +
                      " = " + std::to_string(c.devices()));
  return static_cast<int>(asked);
}

// A layout named on the command line, checked as the search checks its own: it must use the
// planned devices and be one a run would start (the run's own words otherwise).
plan::Layout named_layout(const std::string& option, const std::string& text, int devices, const plan::Workload& w,
                          plan::PluginSources& sources) {
  const plan::Layout l = plan::parse_layout(text);
  std::string bad = l.world() != devices ? "uses " + std::to_string(l.world()) + " devices, not the " +
                                               std::to_string(devices) + " planned for (set --devices or --nodes)"
                                         : plan::planner_limits(w, l);
  if (bad.empty()) bad = sources.problems()(w, l);
  if (!bad.empty()) throw ConfigError(option + " " + l.name() + ": " + bad);
  return l;
}

void print_versus(const plan::SearchResult& r, const Estimate& e) {
  size_t rank = 0;
  while (rank < r.ranked.size() && r.ranked[rank].layout.name() != e.layout.name()) ++rank;
  const std::string where = rank < r.ranked.size() ? "rank " + std::to_string(rank + 1) + " of " + std::to_string(r.ranked.size())
                                                   : "not among the ranked layouts (--fix leaves it out)";
  std::printf("versus %s: %.1f ms, %s; %s\n", e.layout.name().c_str(), e.step_ms, where.c_str(),
              rank == 0 ? "it is the top layout" : plan::versus(r.ranked.front(), e).c_str());
}

// --emit's overrides for a layout: the command's own --set and --dtype, the layout's, and the
// cluster file the run then prints its prediction from.
std::vector<std::string> emit_overrides(const po::variables_map& vm, const plan::Workload& w, const plan::Layout& l) {
  if (!vm.count("out")) throw UsageError("--emit needs --out FILE, where the config is written");
  if (l.recompute != "none" && l.recompute != "selective" && l.recompute != "full")
    throw ConfigError("--emit: recompute '" + l.recompute + "' is a published run's policy that Loom does not run");
  std::vector<std::string> overrides = sets(vm);
  if (!vm["dtype"].as<std::string>().empty()) overrides.push_back("plugins.precision=" + vm["dtype"].as<std::string>());
  for (const std::string& s : plan::layout_sets(w, l)) overrides.push_back(s);
  overrides.push_back("run.plan_cluster=\"" + std::filesystem::absolute(vm["cluster"].as<std::string>()).string() + "\"");
  return overrides;
}

// --emit: the config with `overrides`, as `loom config check` and `loom train` read it, checked by
// the same check before it is written under `head`.
void write_emitted(const po::variables_map& vm, const std::vector<std::string>& overrides, int world, const plan::Layout& l,
                   std::string head) {
  const std::string file = vm["file"].as<std::string>(), out = vm["out"].as<std::string>();
  config::Config cfg = plugins::load_for_job(file, overrides, world);
  plugins::Registry reg(plugins::Registry::default_dirs(plugins::read_plugins(cfg).path));
  plugins::set_plugin_source(&reg, &cfg);
  const plugins::Selection sel = plugins::resolve(cfg, reg);
  train::check_layout(cfg, sel, dist::resolve_mesh(cfg, world));
  head = "# Written by `loom plan " + file + " --cluster " + vm["cluster"].as<std::string>() + " --emit \"" +
         vm["emit"].as<std::string>() + "\"` (its --set overrides included): " + head;
  head += "# Check it with `loom config check`, run it with `loom train`.\n\n";
  std::ofstream f(out);
  f << head << cfg.render(sel.schemas);
  if (!f.flush()) throw RuntimeError("cannot write " + out);
  std::printf("wrote %s: %s (%d ranks); loom train %s\n", out.c_str(), l.name().c_str(), world, out.c_str());
}

void emit_config(const po::variables_map& vm, const plan::Workload& w, const Estimate& e, const plan::Cluster& c) {
  char head[320];
  std::snprintf(head, sizeof head, "layout %s, predicted %.1f ms per step, %.1f%% MFU, %.2f GiB per rank on %s.\n",
                e.layout.name().c_str(), e.step_ms, 100 * e.mfu, gib(e.memory.total()), c.name.c_str());
  std::string text = head;
  if (!e.extrapolated.empty()) text += "# Extrapolated: " + e.extrapolated + ".\n";
  write_emitted(vm, emit_overrides(vm, w, e.layout), e.layout.world(), e.layout, text);
}

// The layout --emit names: a rank of the table ("1" is the top one) or a layout.
// When an option names a row of the table by its rank ("1" is the top one), that row's index;
// otherwise (a layout) nothing.
std::optional<size_t> table_row(const std::string& option, const std::string& what, size_t rows) {
  if (what.empty() || what.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  const size_t rank = std::stoul(what);
  if (rank < 1 || rank > rows) throw ConfigError("--" + option + " " + what + ": the table ranks " + std::to_string(rows) + " layouts");
  return rank - 1;
}

Estimate emitted(const po::variables_map& vm, const plan::SearchResult& r, const plan::Workload& w, int devices,
                 plan::PluginSources& sources, const plan::Cluster& c) {
  const std::string what = vm["emit"].as<std::string>();
  if (const auto row = table_row("emit", what, r.ranked.size())) return r.ranked[*row];
  const plan::Layout l = named_layout("--emit", what, devices, w, sources);
  Estimate e = plan::estimate(c, w, l, sources.costs(), sources.pipes());
  plan::judge(e, plan::calibration_of(c), w);
  return e;
}

// A mixed cluster ([[group]]s): the layouts whose stages fit the groups, each in its best group
// order and balanced split, against the devices-alike split; --explain and --emit as for one kind.
int plan_mixed(const po::variables_map& vm, const config::Config& cfg) {
  const plan::MixedCluster mc = plan::load_mixed_cluster(vm["cluster"].as<std::string>());
  if (vm.count("nodes") || vm.count("devices"))
    throw UsageError("a mixed cluster is planned on all its groups' devices: set each [[group]]'s nodes in " + mc.source);
  if (vm.count("versus")) throw UsageError("--versus compares layouts on one node kind; on a mixed cluster, --explain LAYOUT");
  const plan::Workload w = plan::workload_of(cfg, vm["dtype"].as<std::string>());
  plan::PluginSources sources(plugins::Registry::default_dirs(plugins::read_plugins(cfg).path), &cfg);
  const plan::Fixed fixed = plan::parse_fixed(vm.count("fix") ? vm["fix"].as<std::vector<std::string>>() : std::vector<std::string>{});
  const plan::MixedSearch r = plan::search_mixed(mc, w, fixed, sources.costs(), sources.pipes(), sources.problems());
  if (r.ranked.empty())
    throw ConfigError("no layout of " + std::to_string(mc.devices()) + " devices puts whole pipeline stages on every group of " +
                      mc.source + " (1F1B or GPipe; each group's devices a multiple of a stage's)");
  auto named = [&](const std::string& option) -> const plan::MixedEstimate& {
    const std::string what = vm[option].as<std::string>();
    if (const auto row = table_row(option, what, r.ranked.size())) return r.ranked[*row];
    const std::string name = plan::parse_layout(what).name();
    for (const plan::MixedEstimate& e : r.ranked)  // ranked: the first is its best group order
      if (e.layout.name() == name) return e;
    throw ConfigError("--" + option + " " + name + ": not a layout whose stages fit the groups of " + mc.source);
  };
  if (vm.count("explain")) {
    std::printf("%s", plan::explain_mixed(mc, named("explain")).c_str());
    return kExitOk;
  }
  if (vm.count("emit")) {
    const plan::MixedEstimate& e = named("emit");
    std::vector<std::string> overrides = emit_overrides(vm, w, e.layout);
    int per_node = mc.groups.front().per_node;
    for (const plan::NodeGroupKind& g : mc.groups)
      if (g.per_node != per_node) throw ConfigError("--emit: the groups run " + std::to_string(per_node) + " and " + std::to_string(g.per_node) +
                                                    " ranks per node; Loom's launchers start [parallel] nproc on every node");
    std::string groups;
    for (const std::string& g : plan::group_entries(mc, e.order)) groups += (groups.empty() ? "\"" : ", \"") + g + "\"";
    overrides.push_back("parallel.nproc=" + std::to_string(per_node));
    overrides.push_back("parallel.groups=[" + groups + "]");
    overrides.push_back("parallel.pp_layout=\"" + e.pp_layout + "\"");
    char steps[160];
    std::snprintf(steps, sizeof steps, "predicted %.1f ms per step (%.1f ms with the devices-alike split)", e.step_ms, e.uniform_step_ms);
    write_emitted(vm, overrides, e.layout.world(), e.layout,
                  "layout " + e.layout.name() + ", groups in node order as [parallel] groups lists them, split " + e.pp_layout + ": " +
                      steps + " on " + mc.name + ".\n");
    return kExitOk;
  }
  if (vm["json"].as<bool>()) {
    for (const plan::MixedEstimate& e : r.ranked) {
      std::string order;
      for (int g : e.order) order += (order.empty() ? "" : ", ") + json_quote(mc.groups[size_t(g)].name);
      std::printf("{\"layout\": %s, \"groups\": [%s], \"pp_layout\": %s, \"step_ms\": %s, \"uniform_step_ms\": %s, \"mfu\": %s, "
                  "\"peak_mem_bytes\": %s, \"fits\": %s}\n", json_quote(e.layout.name()).c_str(), order.c_str(),
                  json_quote(e.pp_layout).c_str(), json_number(e.step_ms).c_str(), json_number(e.uniform_step_ms).c_str(),
                  json_number(e.mfu).c_str(), json_number(plan::summary_of(e).memory.total()).c_str(), e.fits ? "true" : "false");
    }
    return kExitOk;
  }
  std::printf("%s, global batch %lld x %lld tokens, %s, on mixed cluster '%s': %s\n%ld layouts and group orders costed\n\n",
              w.model.describe().c_str(), (long long)w.global_batch, (long long)w.model.seq_len, w.dtype.c_str(), mc.name.c_str(),
              mc.describe().c_str(), r.considered);
  const size_t top = std::min(r.ranked.size(), size_t(vm["top"].as<int>()));
  int width = 30;
  for (size_t i = 0; i < top; ++i) width = std::max(width, int(r.ranked[i].layout.name().size()));
  std::printf("%4s  %-*s %-16s %10s %11s %7s %6s %9s %5s  %s\n", "#", width, "layout", "groups", "step ms", "uniform ms", "faster", "MFU",
              "mem GiB", "fits", "split");
  for (size_t i = 0; i < top; ++i) {
    const plan::MixedEstimate& e = r.ranked[i];
    std::string order;
    for (int g : e.order) order += (order.empty() ? "" : ",") + mc.groups[size_t(g)].name;
    const Estimate s = plan::summary_of(e);
    std::printf("%4zu  %-*s %-16s %10.1f %11.1f %6.1f%% %5.1f%% %9.3f %5s  %s\n", i + 1, width, e.layout.name().c_str(), order.c_str(),
                e.step_ms, e.uniform_step_ms, 100 * (1 - e.step_ms / e.uniform_step_ms), 100 * e.mfu, gib(s.memory.total()),
                e.fits ? "yes" : "no", e.pp_layout.c_str());
  }
  std::printf("\nwhy #1:\n%s", plan::explain_mixed(mc, r.ranked.front()).c_str());
  return kExitOk;
}

}  // namespace

int plan_cmd(const Args& args) {
  if (!args.empty() && args[0] == "calibrate") return plan_calibrate(Args(args.begin() + 1, args.end()));
  if (!args.empty() && args[0] == "published") return published(Args(args.begin() + 1, args.end()));
  po::options_description opts("loom plan");
  opts.add_options()("file", po::value<std::string>()->required(), "the training config (model, batch, precision)")(
      "cluster", po::value<std::string>()->required(), "cluster file (clusters/*.toml)")(
      "nodes", po::value<int>(), "nodes to plan for (default: one node, or [parallel] nproc on a CPU machine)")(
      "devices", po::value<int>(), "devices to plan for, instead of --nodes")(
      "top", ranged<int>("top", 1, 1000000)->default_value(10), "rows of the ranked table")(
      "fix", po::value<std::vector<std::string>>()->composing(), "keep a choice fixed: tp=8, zero=1, recompute=full, "
      "schedule=1f1b, mb=2, sp=on, chunks=3 (repeatable, or comma-separated)")(
      "explain", po::value<std::string>(), "break one layout's step down, e.g. \"dp4 tp2 zero1 mb2\"")(
      "versus", po::value<std::string>(), "also say where this layout (yours, or a published one) ranks, and why")(
      "emit", po::value<std::string>(), "write the config that runs a layout: its rank in the table (1 = the top) or the layout")(
      "out", po::value<std::string>(), "where --emit writes the config")(
      "dtype", po::value<std::string>()->default_value(""), "fp32 | bf16 | fp16 | fp8 (default: [plugins] precision)")(
      "json", po::bool_switch(), "every layout as one JSON object per line, ranked");
  add_set_option(opts);
  po::positional_options_description pos;
  pos.add("file", 1);
  po::variables_map vm;
  const std::string synopsis = "loom plan CONFIG --cluster FILE [--nodes N | --devices N] [--top K] [--fix k=v] "
                               "[--explain LAYOUT] [--emit RANK|LAYOUT --out FILE] [--json]\n"
                               "       loom plan calibrate --out FILE\n       loom plan published";
  if (!parse(args, synopsis, opts, pos, vm)) return kExitOk;
  config::Config cfg = config::Config::load(vm["file"].as<std::string>(), sets(vm));
  cfg.validate_runtime();
  if (plan::has_groups(vm["cluster"].as<std::string>())) return plan_mixed(vm, cfg);
  const plan::Cluster c = plan::load_cluster(vm["cluster"].as<std::string>());
  const plan::Workload w = plan::workload_of(cfg, vm["dtype"].as<std::string>());
  const int devices = devices_to_plan(vm, c, cfg);
  plan::PluginSources sources(plugins::Registry::default_dirs(plugins::read_plugins(cfg).path), &cfg);
  if (vm.count("explain")) {
    const plan::Layout l = named_layout("--explain", vm["explain"].as<std::string>(), devices, w, sources);
    Estimate e = plan::estimate(c, w, l, sources.costs(), sources.pipes());
    plan::judge(e, plan::calibration_of(c), w);
    if (vm["json"].as<bool>()) std::printf("%s\n", estimate_json(e).c_str());
    else explain(e, c);
    return kExitOk;
  }
  const plan::Fixed fixed = plan::parse_fixed(vm.count("fix") ? vm["fix"].as<std::vector<std::string>>() : std::vector<std::string>{});
  const auto t0 = std::chrono::steady_clock::now();
  plan::SearchResult r = plan::search(c, w, devices, fixed, sources.costs(), sources.pipes(), sources.problems());
  const plan::Calibration cal = plan::calibration_of(c);
  for (Estimate& e : r.ranked) plan::judge(e, cal, w);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (r.ranked.empty()) throw ConfigError("no layout of " + std::to_string(devices) + " devices can run this model" +
                                          (fixed.values.empty() ? "" : " with the --fix choices"));
  if (vm.count("emit")) {
    emit_config(vm, w, emitted(vm, r, w, devices, sources, c), c);
    return kExitOk;
  }
  if (vm["json"].as<bool>()) {
    for (const auto& e : r.ranked) std::printf("%s\n", estimate_json(e).c_str());
    return kExitOk;
  }
  std::printf("%s, global batch %lld x %lld tokens, %s, on %d x %s (%s)\n", w.model.describe().c_str(),
              (long long)w.global_batch, (long long)w.model.seq_len, w.dtype.c_str(), devices, c.device.c_str(), c.name.c_str());
  std::printf("%ld layouts costed in %.2f s (those the named plugins can run)\n\n", r.considered, secs);
  print_table(r.ranked, size_t(std::max(1, vm["top"].as<int>())));
  print_region(r.ranked, cal);
  std::printf("\nwhy: %s\n", plan::reason(r).c_str());
  if (vm.count("versus")) {
    const plan::Layout mine = named_layout("--versus", vm["versus"].as<std::string>(), devices, w, sources);
    const auto it = std::find_if(r.ranked.begin(), r.ranked.end(), [&](const Estimate& e) { return e.layout.name() == mine.name(); });
    print_versus(r, it != r.ranked.end() ? *it : plan::estimate(c, w, mine, sources.costs(), sources.pipes()));
  }
  for (const auto& n : r.notes) std::printf("note: %s\n", n.c_str());
  return kExitOk;
}

}  // namespace loom::cli
