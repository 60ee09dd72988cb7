// loom plan published [--clusters DIR] [--json] [--fit] [--cross-validate]
// Every published run (configs/published/*.toml) planned on its cluster file, beside the figure
// its source reports; --fit fits each device kind's efficiencies to its runs, and
// --cross-validate also predicts each run from a fit without it (plan/fit.hpp).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "cli/parse.hpp"
#include "cli/plan_ranking.hpp"
#include "core/errors.hpp"
#include "core/json_line.hpp"
#include "plan/fit.hpp"
#include "plan/published.hpp"

namespace loom::cli {

namespace {

std::string shown(const plan::PublishedRun& run, double v) {
  char b[32];
  if (run.metric == "mfu")
    std::snprintf(b, sizeof b, "%.1f%% MFU", 100 * v);
  else if (run.metric == "tflops")
    std::snprintf(b, sizeof b, "%.1f TF/s", v);
  else
    std::snprintf(b, sizeof b, "%.0f tok/s", v);
  return b;
}

// The table: each run as its cluster file predicts it.
void table(const std::vector<plan::FitSet>& sets, bool json) {
  int run_w = 26, layout_w = 40;  // grown to the longest entry, so the columns stay in line
  for (const auto& set : sets)
    for (const plan::PublishedRun* run : set.runs)
      run_w = std::max(run_w, int(run->name.size())),
      layout_w = std::max(layout_w, int(run->layout.name().size()));
  if (!json)
    std::printf("%-*s %-12s %-*s %12s %12s %8s %14s\n", run_w, "run", "cluster", layout_w, "layout",
                "published", "predicted", "error", "mem GiB / dev");
  std::vector<double> errors;
  int fit = 0;
  for (const auto& set : sets)
    for (const plan::PublishedRun* run : set.runs) {
      const plan::Cluster& c = set.clusters.at(run->cluster);
      plan::PluginSources sources = plan::published_sources(*run);
      const plan::Estimate e =
          plan::estimate(c, run->workload, run->layout, sources.costs(), sources.pipes());
      const double p = plan::predicted_metric(*run, e), err = p / run->published - 1;
      errors.push_back(err);
      fit += e.memory.total() <= c.memory;  // they ran: their memory must fit the device
      if (json) {
        nlohmann::ordered_json j;
        j["run"] = run->name, j["file"] = run->file, j["source"] = run->source,
        j["cluster"] = run->cluster, j["kind"] = set.kind, j["layout"] = run->layout.name();
        j["metric"] = run->metric, j["published"] = run->published, j["predicted"] = p,
        j["error"] = err;
        j["predicted_mem_bytes"] = e.memory.total(), j["device_mem_bytes"] = c.memory;
        std::printf("%s\n", json_line(j).c_str());
      } else {
        std::printf("%-*s %-12s %-*s %12s %12s %+7.1f%% %8.1f / %3.0f\n", run_w, run->name.c_str(),
                    run->cluster.c_str(), layout_w, run->layout.name().c_str(),
                    shown(*run, run->published).c_str(), shown(*run, p).c_str(), 100 * err,
                    gib(e.memory.total()), gib(c.memory));
      }
    }
  if (json) return;
  const long within =
      std::count_if(errors.begin(), errors.end(), [](double e) { return std::fabs(e) <= 0.15; });
  std::printf(
      "\nall %zu runs, with the cluster files' efficiencies: median |error| %.1f%%, %ld within "
      "15%%; predicted memory within the device for %d\n",
      errors.size(), 100 * plan::median_abs(errors), within, fit);
}

void print_values(const plan::FitSet& set, const plan::FitResult& r) {
  std::printf("%s: %zu runs, rms log error %.3f after %d iterations\n", set.kind.c_str(),
              set.runs.size(), r.rms, r.iterations);
  for (int k = 0; k < plan::kFitted; ++k)
    std::printf("  %-18s = %.3f\n", plan::kFittedKeys[k], r.values.v[k]);
}

// Each run predicted without itself; the median and the worst, and each kind's band.
void cross_validate(const std::vector<plan::FitSet>& sets) {
  std::vector<double> all;
  std::printf("\nleave-one-out: each run predicted by its kind's fit without it\n");
  for (size_t s = 0; s < sets.size(); ++s) {
    const plan::FitSet& set = sets[s];
    std::fprintf(stderr, "cross-validating %s: %zu fits\n", set.kind.c_str(), set.runs.size());
    const std::vector<double> loo = plan::leave_one_out(
        set, [&](size_t done) { std::fprintf(stderr, "  %zu/%zu\r", done, set.runs.size()); });
    double low = 0, high = 0;
    for (size_t i = 0; i < loo.size(); ++i) {
      std::printf("  %-36s %-10s %+7.1f%%%s\n", set.runs[i]->name.c_str(), set.kind.c_str(),
                  100 * loo[i], std::fabs(loo[i]) > 0.25 ? "  (over 25%)" : "");
      low = std::min(low, loo[i]), high = std::max(high, loo[i]);
      all.push_back(loo[i]);
    }
    std::printf("  %s band (leave-one-out residuals): %+.1f%%..%+.1f%%, median |error| %.1f%%\n",
                set.kind.c_str(), 100 * low, 100 * high, 100 * plan::median_abs(loo));
  }
  const long over =
      std::count_if(all.begin(), all.end(), [](double e) { return std::fabs(e) > 0.25; });
  std::printf("\nall %zu runs, leave-one-out: median |error| %.1f%%, %ld over 25%%\n", all.size(),
              100 * plan::median_abs(all), over);
}

}  // namespace

int plan_published(const Args& args) {
  po::options_description opts("loom plan published");
  opts.add_options()("clusters", po::value<std::string>()->default_value("clusters"),
                     "directory of cluster files")("json", po::bool_switch(),
                                                   "one JSON object per run")(
      "fit", po::bool_switch(), "fit each device kind's efficiencies to its runs and print them")(
      "cross-validate", po::bool_switch(),
      "also predict each run from a fit without it (leave-one-out), and print the error");
  po::variables_map vm;
  if (!parse(args, "loom plan published [--clusters DIR] [--json] [--fit] [--cross-validate]", opts,
             {}, vm))
    return kExitOk;
  const std::vector<plan::FitSet> sets = plan::fit_sets(vm["clusters"].as<std::string>());
  const bool fit = vm["fit"].as<bool>(), cv = vm["cross-validate"].as<bool>();
  if (!fit && !cv) return table(sets, vm["json"].as<bool>()), kExitOk;
  if (vm["json"].as<bool>())
    throw UsageError("--json writes the table's rows; --fit and --cross-validate print text");
  for (const plan::FitSet& set : sets) {
    std::fprintf(stderr, "fitting %s to %zu runs\n", set.kind.c_str(), set.runs.size());
    print_values(set, plan::fit(set));
  }
  if (cv) cross_validate(sets);
  return kExitOk;
}

}  // namespace loom::cli
