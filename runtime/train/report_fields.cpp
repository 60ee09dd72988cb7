#include "train/report_fields.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "model/model.hpp"

namespace loom::train {

double value_of(const Fields& f, const std::string& name) {
  for (const auto& [k, v] : f)
    if (k == name) return v;
  return NAN;
}

std::string human_count(double x) {
  char b[32];
  if (x >= 1e6)
    std::snprintf(b, sizeof b, "%.2fM", x / 1e6);
  else if (x >= 1e3)
    std::snprintf(b, sizeof b, "%.1fk", x / 1e3);
  else
    std::snprintf(b, sizeof b, "%.0f", x);
  return b;
}

void add_memory_metrics(Fields& f, const std::vector<int64_t>& acct, int64_t peak_since_mark) {
  const char* names[] = {"param_bytes", "grad_bytes", "optim_bytes", "comm_buffer_bytes",
                         "data_comm_bytes"};
  for (size_t i = 0; i < 5; ++i) f.push_back({names[i], double(acct[i])});
  const int64_t state = acct[0] + acct[1] + acct[2] + acct[3];
  f.push_back({"activation_peak_bytes", double(std::max<int64_t>(0, peak_since_mark - state))});
}

void add_moe_metrics(Fields& f, const model::Model& model, bool expert_parallel,
                     const SumOverData& sum_over_data) {
  for (auto& [name, routed] : model.routed_layers()) {
    const model::RoutingStats& st = routed->stats();
    // [load (E) | assignments, dropped, tokens, aux, z]
    std::vector<double> sums(st.load.begin(), st.load.end());
    for (double v : {double(st.assignments), double(st.dropped), double(st.tokens), st.aux, st.z})
      sums.push_back(v);
    if (sum_over_data) sum_over_data(sums.data(), static_cast<int64_t>(sums.size()));
    const size_t E = st.load.size();
    const double assignments = sums[E], dropped = sums[E + 1], tokens = sums[E + 2];
    const double mean = assignments / double(E),
                 most = *std::max_element(sums.begin(), sums.begin() + E);
    const std::string at = "moe." + name + ".";
    f.push_back({at + "load_max_over_mean", mean > 0 ? most / mean : 0.0});
    f.push_back({at + "dropped", assignments > 0 ? dropped / assignments : 0.0});
    f.push_back({at + "aux", tokens > 0 ? sums[E + 3] / tokens : 0.0});
    f.push_back({at + "z", tokens > 0 ? sums[E + 4] / tokens : 0.0});
    if (expert_parallel) f.push_back({at + "all_to_all_ms", st.all_to_all_ms});
    for (size_t e = 0; e < E; ++e) f.push_back({at + "load." + std::to_string(e), sums[e]});
  }
}

void add_pipeline_metrics(Fields& f, const PipeStepStats& st) {
  f.push_back({"pipeline_bubble", st.bubble()});
  f.push_back({"pipeline_in_flight", double(st.peak_in_flight)});
  f.push_back({"pipeline_activation_bytes", double(st.peak_activation_bytes)});
  // Each stage's compute per step, and the busiest over the mean: 1 when balanced.
  double most = 0, total = 0;
  for (size_t s = 0; s < st.stage_busy_ms.size(); ++s) {
    f.push_back({"stage" + std::to_string(s) + "_compute_ms", st.stage_busy_ms[s]});
    most = std::max(most, st.stage_busy_ms[s]), total += st.stage_busy_ms[s];
  }
  if (total > 0)
    f.push_back({"pipeline_stage_imbalance", most / (total / double(st.stage_busy_ms.size()))});
}

void add_comm_metrics(Fields& f, const std::vector<dist::GroupTraffic>& traffic,
                      double data_plugin_comm_ms, double data_plugin_exposed_ms) {
  double comm_ms = 0, exposed_ms = 0, bytes = 0, pp_wait_ms = 0;
  Fields groups;
  for (const dist::GroupTraffic& g : traffic) {
    std::string name = g.name;
    std::replace(name.begin(), name.end(), ' ', '_');
    bytes += double(g.bytes);
    groups.push_back({"comm_bytes_" + name, double(g.bytes)});
    if (g.name == "pp") {
      pp_wait_ms = g.exposed_ms;
      continue;
    }
    comm_ms += g.comm_ms;
    exposed_ms += g.exposed_ms;
    groups.push_back({"exposed_comm_ms_" + name, g.exposed_ms});
  }
  f.push_back({"comm_ms", comm_ms});
  f.push_back({"exposed_comm_ms", exposed_ms});
  f.push_back({"comm_bytes_all", bytes});
  f.push_back({"pp_wait_ms", pp_wait_ms});
  f.insert(f.end(), groups.begin(), groups.end());
  f.push_back({"data_plugin_comm_ms", data_plugin_comm_ms});
  f.push_back({"data_plugin_exposed_comm_ms", data_plugin_exposed_ms});
}

}  // namespace loom::train
