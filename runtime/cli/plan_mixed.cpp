#include <algorithm>
#include <cstdio>

#include "cli/plan_ranking.hpp"
#include "core/errors.hpp"
#include "core/json_line.hpp"
#include "loader/plugin_settings.hpp"
#include "loader/registry.hpp"
#include "plan/from_config.hpp"
#include "plan/mixed.hpp"
#include "plan/mixed_cluster.hpp"
#include "plan/search.hpp"
#include "plan/sources.hpp"

namespace loom::cli {

namespace {

// The options a mixed cluster cannot take are refused before anything is costed.
plan::MixedCluster checked_cluster(const PlanOptions& o) {
  plan::MixedCluster mc = plan::load_mixed_cluster(o.cluster);
  if (o.nodes || o.devices)
    throw UsageError(
        "a mixed cluster is planned on all its groups' devices: set each [[group]]'s nodes in " +
        mc.source);
  if (o.versus)
    throw UsageError(
        "--versus compares layouts on one node kind; on a mixed cluster, --explain LAYOUT");
  return mc;
}

// A cluster of node groups ([[group]]s): the layouts whose stages fit the groups, each in its
// best group order and balanced split, against the devices-alike split.
class MixedRanking final : public Ranking {
 public:
  MixedRanking(const PlanOptions& o, const train::JobSettings& job)
      : o_(o),
        mc_(checked_cluster(o)),
        w_(plan::on_cluster(plan::workload_of(job, o.dtype), mc_.groups.front().cluster)) {
    plan::PluginSources sources(plugins::Registry::default_dirs(job.plugins.path),
                                job.plugins.tables);
    r_ = plan::search_mixed(mc_, w_, plan::parse_fixed(o.fix), sources.costs(), sources.pipes(),
                            sources.problems());
    if (r_.ranked.empty())
      throw ConfigError("no layout of " + std::to_string(mc_.devices()) +
                        " devices puts whole pipeline stages on every group of " + mc_.source +
                        " (1F1B or GPipe; each group's devices a multiple of a stage's)");
  }

  // A layout's row is its best group order, the first of its rows in the ranking.
  size_t row(const std::string& option, const std::string& what) override {
    if (const auto row = table_row(option, what, r_.ranked.size())) return *row;
    const std::string name = plan::parse_layout(what).name();
    for (size_t i = 0; i < r_.ranked.size(); ++i)
      if (r_.ranked[i].layout.name() == name) return i;
    throw ConfigError("--" + option + " " + name +
                      ": not a layout whose stages fit the groups of " + mc_.source);
  }
  size_t size() override { return r_.ranked.size(); }

  nlohmann::ordered_json json(size_t i) const override {
    const plan::MixedEstimate& e = r_.ranked[i];
    nlohmann::ordered_json j, groups = nlohmann::ordered_json::array();
    for (int g : e.order) groups.push_back(mc_.groups[size_t(g)].name);
    j["layout"] = e.layout.name(), j["groups"] = groups, j["pp_layout"] = e.pp_layout;
    j["step_ms"] = e.step_ms, j["uniform_step_ms"] = e.uniform_step_ms, j["mfu"] = e.mfu;
    j["peak_mem_bytes"] = plan::summary_of(e).memory.total(), j["fits"] = e.fits;
    return j;
  }
  void explain(size_t i) const override {
    std::printf("%s", plan::explain_mixed(mc_, r_.ranked[i]).c_str());
  }

  // Loom's launchers start [parallel] nproc ranks on every node, so the groups must agree on it.
  Emitted emitted(size_t i) const override {
    const plan::MixedEstimate& e = r_.ranked[i];
    std::vector<std::string> overrides = emit_overrides(o_, w_, e.layout);
    const int per_node = mc_.groups.front().per_node;
    for (const plan::NodeGroupKind& g : mc_.groups)
      if (g.per_node != per_node)
        throw ConfigError("--emit: the groups run " + std::to_string(per_node) + " and " +
                          std::to_string(g.per_node) +
                          " ranks per node; Loom's launchers start [parallel] nproc on every node");
    std::string groups;
    for (const std::string& g : plan::group_entries(mc_, e.order))
      groups += (groups.empty() ? "\"" : ", \"") + g + "\"";
    overrides.push_back("parallel.nproc=" + std::to_string(per_node));
    overrides.push_back("parallel.groups=[" + groups + "]");
    overrides.push_back("parallel.pp_layout=\"" + e.pp_layout + "\"");
    char steps[160];
    std::snprintf(steps, sizeof steps,
                  "predicted %.1f ms per step (%.1f ms with the devices-alike split)", e.step_ms,
                  e.uniform_step_ms);
    return {e.layout, e.layout.world(), overrides,
            "layout " + e.layout.name() +
                ", groups in node order as [parallel] groups lists them, split " + e.pp_layout +
                ": " + steps + " on " + mc_.name + ".\n",
            w_.device};
  }

  void table(size_t top) override {
    std::printf(
        "%s, global batch %lld x %lld tokens, %s, on mixed cluster '%s': %s\n%ld layouts and group "
        "orders costed\n\n",
        w_.model.describe().c_str(), (long long)w_.global_batch, (long long)w_.model.seq_len,
        w_.dtype.c_str(), mc_.name.c_str(), mc_.describe().c_str(), r_.considered);
    top = std::min(r_.ranked.size(), top);
    int width = 30;
    for (size_t i = 0; i < top; ++i)
      width = std::max(width, int(r_.ranked[i].layout.name().size()));
    std::printf("%4s  %-*s %-16s %10s %11s %7s %6s %9s %5s  %s\n", "#", width, "layout", "groups",
                "step ms", "uniform ms", "faster", "MFU", "mem GiB", "fits", "split");
    for (size_t i = 0; i < top; ++i) {
      const plan::MixedEstimate& e = r_.ranked[i];
      std::string order;
      for (int g : e.order) order += (order.empty() ? "" : ",") + mc_.groups[size_t(g)].name;
      std::printf("%4zu  %-*s %-16s %10.1f %11.1f %6.1f%% %5.1f%% %9.3f %5s  %s\n", i + 1, width,
                  e.layout.name().c_str(), order.c_str(), e.step_ms, e.uniform_step_ms,
                  100 * (1 - e.step_ms / e.uniform_step_ms), 100 * e.mfu,
                  gib(plan::summary_of(e).memory.total()), e.fits ? "yes" : "no",
                  e.pp_layout.c_str());
    }
    std::printf("\nwhy #1:\n%s", plan::explain_mixed(mc_, r_.ranked.front()).c_str());
  }

 private:
  const PlanOptions& o_;
  const plan::MixedCluster mc_;
  const plan::Workload w_;
  plan::MixedSearch r_;
};

}  // namespace

std::unique_ptr<Ranking> mixed_ranking(const PlanOptions& o, const train::JobSettings& job) {
  return std::make_unique<MixedRanking>(o, job);
}

}  // namespace loom::cli
