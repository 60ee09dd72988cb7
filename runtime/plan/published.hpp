// Published large training runs, from their configurations alone, for checking the planner:
// Narayanan et al. 2021 (SC21) Table 1 and later runs on A100, and runs on H100. Each row's layout
// is the one the authors published; the planner predicts its throughput with one cluster file per
// machine kind and no per-row settings.
#pragma once

#include <string>
#include <vector>

#include "plan/estimate.hpp"
#include "plan/sources.hpp"

namespace loom::plan {

struct PublishedRun {
  std::string name, source, cluster;  // cluster: the clusters/*.toml it ran on
  Workload workload;
  Layout layout;
  std::string metric;    // "tflops" (per GPU, the paper's count) | "mfu" | "tokens"
  double published = 0;  // in the metric's unit (TFLOP/s, fraction, tokens/s/GPU)
  // How the source counts FLOPs: "model" (Loom's: 6 N with the head, no input embedding, + 12 L H Q
  // T), "executed" (the tied head too: Korthikanti et al.), "megatron2021" (Narayanan et al. eq. 3,
  // recompute included: 96 B s l h^2 ...).
  std::string flops = "model";
  // Plugin options of the published configuration where Loom's defaults differ ("[plugins.tp]
  // overlap = "off": Megatron-LM 2021 did not overlap tp's collectives).
  std::string plugin_options;
};

const std::vector<PublishedRun>& published_runs();
// The cost entries and schedules a published run is planned with: the installed plugins under
// its plugin_options.
PluginSources published_sources(const PublishedRun& run);

// FLOPs of one iteration as Narayanan et al. 2021 eq. 3 count them (with full recompute):
// 96 B s l h^2 (1 + s / 6h + V / 16 l h).
double megatron_flops(const model::Config& m, int64_t batch);

// The metric as the paper reports it, from a prediction.
double predicted_metric(const PublishedRun& run, const Estimate& e);

}  // namespace loom::plan
