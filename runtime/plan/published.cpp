#include "plan/published.hpp"

#include <map>

#include "config/config.hpp"
#include "config/section.hpp"
#include "core/errors.hpp"
#include "loader/registry.hpp"
#include "plan/from_config.hpp"
#include "train/job_settings.hpp"

namespace loom::plan {

using config::kInf;
using config::ValueType;

namespace {

// [published]: the row's name, source, cluster, metric, value and FLOP count.
config::SectionSpec published_section() {
  return {
      "published",
      "a published run this config reproduces: `loom plan published` predicts its figure",
      {
          {"name", ValueType::String, "\"\"", "the row's name in the table"},
          {"source", ValueType::String, "\"\"", "the paper, log or page the figure is from"},
          {"cluster", ValueType::String, "\"\"", "the cluster file it ran on (clusters/NAME.toml)"},
          {"metric",
           ValueType::String,
           "\"mfu\"",
           "what the source reports: tflops (per GPU) | mfu | tokens (per second per GPU)",
           -kInf,
           kInf,
           {"tflops", "mfu", "tokens"}},
          {"value", ValueType::Float, "0", "the published figure, in the metric's unit", 0, kInf},
          {"flops",
           ValueType::String,
           "\"model\"",
           "how the source counts FLOPs: model (Loom's) | executed (the tied head too) | "
           "megatron2021 (Narayanan et al. eq. 3, recompute included)",
           -kInf,
           kInf,
           {"model", "executed", "megatron2021"}},
      }};
}

}  // namespace

const std::vector<config::SectionSpec>& plan_sections() {
  static const std::vector<config::SectionSpec> sections = [] {
    std::vector<config::SectionSpec> s = train::job_sections();
    s.push_back(published_section());
    return s;
  }();
  return sections;
}

PublishedRun read_published(const std::string& text, const std::string& path) {
  config::Config cfg = config::Config::parse(text, path);
  cfg.validate(plan_sections());
  const config::Section p = cfg.section("published");
  PublishedRun run;
  run.file = path;
  run.name = p.str("name"), run.source = p.str("source"), run.cluster = p.str("cluster");
  run.metric = p.str("metric"), run.published = p.f64("value"), run.flops = p.str("flops");
  for (const char* key : {"name", "source", "cluster"})
    if (p.str(key).empty()) throw ConfigError(path + ": [published] " + key + " is not set");
  if (run.published <= 0) throw ConfigError(path + ": [published] value must be above 0");
  const train::JobSettings job = train::read_job(cfg);
  run.workload = workload_of(job);
  run.layout = layout_of(job);
  run.plugin_path = job.plugins.path, run.plugin_tables = job.plugins.tables;
  return run;
}

const std::vector<PublishedRun>& published_runs() {
  static const std::vector<PublishedRun> runs = [] {
    std::vector<PublishedRun> out;
    for (const PublishedFile& f : published_files()) out.push_back(read_published(f.text, f.path));
    return out;
  }();
  return runs;
}

// One registry scan per distinct set of options, not one per run.
PluginSources published_sources(const PublishedRun& run) {
  static std::map<std::string, PluginSources> by_options;
  auto it = by_options.find(run.plugin_tables);
  if (it == by_options.end()) {
    it = by_options
             .emplace(
                 run.plugin_tables,
                 PluginSources(plugins::Registry::default_dirs(run.plugin_path), run.plugin_tables))
             .first;
  }
  return it->second;  // a copy shares the scan and the cost cache
}

double megatron_flops(const model::Config& m, int64_t batch) {
  const double B = double(batch), s = double(m.seq_len), l = double(m.n_layer),
               h = double(m.d_model), V = double(m.vocab_size);
  return 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
}

// The FLOPs of one step as the source counts them.
double counted_flops(const PublishedRun& run, const Estimate& e) {
  const model::Config& m = run.workload.model;
  const double tokens = double(run.workload.global_batch) * double(m.seq_len);
  if (run.flops == "megatron2021") return megatron_flops(m, run.workload.global_batch);
  if (run.flops == "executed") return m.executed_flops_per_token() * tokens;
  return e.model_flops;  // "model": Loom's count, 6 N (head, no input embedding) + 12 L H Q T
}

double predicted_metric(const PublishedRun& run, const Estimate& e) {
  const double seconds = e.step_ms / 1e3;
  if (run.metric == "tflops") return counted_flops(run, e) / seconds / run.layout.world() / 1e12;
  if (run.metric == "mfu") return e.mfu * counted_flops(run, e) / e.model_flops;
  return e.tokens_per_s_per_device;
}

}  // namespace loom::plan
