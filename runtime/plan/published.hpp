// Published large training runs, each planned from a config file in the tree
// (configs/published/*.toml), for checking the planner: Narayanan et al. 2021 (SC21) Table 1 and
// later runs on A100, and runs on H100. A file is an ordinary job config (the model, the batch,
// the layout the authors published, the plugins' options where they differ from Loom's defaults,
// and [plan]'s facts of how that framework ran it) with a [published] section: where the figure
// comes from, which cluster file it ran on, and the figure itself. Nothing about a row is set
// anywhere else.
#pragma once

#include <string>
#include <vector>

#include "config/schema.hpp"
#include "plan/estimate.hpp"
#include "plan/sources.hpp"

namespace loom::plan {

struct PublishedRun {
  std::string file;                   // configs/published/NAME.toml
  std::string name, source, cluster;  // cluster: the clusters/*.toml it ran on
  Workload workload;
  Layout layout;
  std::string metric;    // "tflops" (per GPU, the paper's count) | "mfu" | "tokens"
  double published = 0;  // in the metric's unit (TFLOP/s, fraction, tokens/s/GPU)
  // How the source counts FLOPs: "model" (Loom's: 6 N with the head, no input embedding, + 12 L H Q
  // T), "executed" (the tied head too: Korthikanti et al.), "megatron2021" (Narayanan et al. eq. 3,
  // recompute included: 96 B s l h^2 ...).
  std::string flops = "model";
  std::vector<std::string> plugin_path;  // [plugins] path
  std::string plugin_tables;             // [plugins] and its option tables, as TOML
};

// What a published run's file may hold, and what `loom plan` reads: a job's sections and
// [published].
const std::vector<config::SectionSpec>& plan_sections();

// One file's run. ConfigError naming the file and key for a file that does not read.
PublishedRun read_published(const std::string& text, const std::string& path);

// The files under configs/published/, as the build found them.
struct PublishedFile {
  const char* path;
  const char* text;
};
const std::vector<PublishedFile>& published_files();

// Every file's run, read once.
const std::vector<PublishedRun>& published_runs();
// The cost entries and schedules a published run is planned with: the installed plugins under
// its options.
PluginSources published_sources(const PublishedRun& run);

// FLOPs of one iteration as Narayanan et al. 2021 eq. 3 count them (with full recompute):
// 96 B s l h^2 (1 + s / 6h + V / 16 l h).
double megatron_flops(const model::Config& m, int64_t batch);

// The metric as the paper reports it, from a prediction.
double predicted_metric(const PublishedRun& run, const Estimate& e);

}  // namespace loom::plan
