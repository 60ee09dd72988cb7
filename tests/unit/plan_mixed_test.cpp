// The planner on a mixed cluster (plan/mixed.hpp): the balanced split, the group order, the
// pipeline formula's link term, and the mixed cluster file's checks.
#include <doctest/doctest.h>

#include <filesystem>

#include "cli/job_config.hpp"
#include "config/config.hpp"
#include "core/errors.hpp"
#include "loader/registry.hpp"
#include "plan/from_config.hpp"
#include "plan/mixed.hpp"
#include "plan/sources.hpp"

using namespace loom;

namespace {

const std::filesystem::path kClusters = std::filesystem::path(LOOM_SOURCE_DIR) / "clusters";

plan::Workload workload() {
  config::Config cfg = config::Config::parse(
      "[model]\nn_layer = 8\nn_head = 4\nd_model = 128\nseq_len = 128\nvocab_size = "
      "8192\n[train]\nglobal_batch = 16\n",
      "<test>");
  cfg.validate(loom::train::job_sections());
  return plan::workload_of(train::read_job(cfg));
}

// Two one-node groups of this-machine-core.toml, the second at `speed`.
plan::MixedCluster two_groups(double speed, double between_gbps = 1.5) {
  char text[512];
  std::snprintf(
      text, sizeof text,
      "[cluster]\nname = \"t\"\n[[group]]\nname = \"a\"\ncluster = "
      "\"this-machine-core.toml\"\nnodes = 1\n"
      "[[group]]\nname = \"b\"\ncluster = \"this-machine-core.toml\"\nnodes = 1\nspeed = %g\n"
      "[between]\nkind = \"test\"\nbandwidth_gbps = %g\nlatency_us = 100\n",
      speed, between_gbps);
  return plan::parse_mixed_cluster(text, "<test>", kClusters);
}

plan::Layout pp2(int mb) { return plan::parse_layout("dp1 pp2 1f1b mb" + std::to_string(mb)); }

int blocks(const plan::MixedEstimate& e, int stage) { return e.stages[size_t(stage)].blocks; }

}  // namespace

TEST_CASE(
    "mixed plan: alike groups split as the devices-alike default does, a half-speed group gets "
    "fewer blocks") {
  plan::PluginSources sources(plugins::Registry::default_dirs());
  const plan::Workload w = workload();
  const plan::MixedEstimate alike = plan::estimate_mixed(two_groups(1.0), w, pp2(2), {0, 1}, "",
                                                         sources.costs(), sources.pipes());
  // The balanced split never loses to the default one; with alike devices it gains little (the
  // default balances FLOPs, the planner its timings).
  CHECK(alike.step_ms <= alike.uniform_step_ms * 1.0001);
  CHECK(alike.step_ms >= 0.9 * alike.uniform_step_ms);
  // The pipeline formula: one trip through both stages and the link, then m - 1 bottleneck periods.
  const double t0 = alike.stages[0].time_ms, t1 = alike.stages[1].time_ms;
  CHECK(alike.pipeline_ms ==
        doctest::Approx(t0 + t1 + alike.boundary_ms + 7 * std::max({t0, t1, alike.boundary_ms})));

  // A split given as a run writes it, spaces optional.
  const plan::MixedEstimate given = plan::estimate_mixed(
      two_groups(0.5), w, pp2(2), {0, 1}, "Ett|ttttttL", sources.costs(), sources.pipes());
  CHECK(given.pp_layout == "E t t | t t t t t t L");
  CHECK((blocks(given, 0) == 2 && blocks(given, 1) == 6));
  CHECK_THROWS_WITH_AS(
      plan::estimate_mixed(two_groups(0.5), w, pp2(2), {0, 1}, "E t t t t t t t t L |",
                           sources.costs(), sources.pipes()),
      doctest::Contains("is not 2 non-empty stages"), ConfigError);

  const plan::MixedEstimate half = plan::estimate_mixed(two_groups(0.5), w, pp2(2), {0, 1}, "",
                                                        sources.costs(), sources.pipes());
  CHECK(blocks(half, 1) < blocks(half, 0));
  CHECK(half.step_ms < 0.85 * half.uniform_step_ms);
  CHECK(half.stages[1].time_ms ==
        doctest::Approx(half.stages[0].time_ms).epsilon(0.35));  // as even as whole blocks allow
}

TEST_CASE(
    "mixed plan: the search puts the head on the faster group, and a slow link between groups "
    "paces the pipeline") {
  plan::PluginSources sources(plugins::Registry::default_dirs());
  const plan::Workload w = workload();
  const plan::MixedCluster half = two_groups(0.5);
  const plan::MixedSearch r =
      plan::search_mixed(half, w, plan::parse_fixed({"schedule=1f1b"}), sources.costs(),
                         sources.pipes(), sources.problems());
  REQUIRE(!r.ranked.empty());
  CHECK(r.ranked.front().order ==
        std::vector<int>{1, 0});  // b (half speed) first: a holds the head (vocab 8192)
  CHECK(r.ranked.front().stages.back().last);
  for (const plan::MixedEstimate& e : r.ranked)
    CHECK(e.layout.pp == 2);  // a group holds whole stages

  // 1 MB/s between the groups: each micro-batch's activations take longer to cross than to compute.
  const plan::MixedEstimate slow_link = plan::estimate_mixed(
      two_groups(1.0, 0.001), w, pp2(2), {0, 1}, "", sources.costs(), sources.pipes());
  CHECK(slow_link.boundary_ms > slow_link.stages[0].time_ms);
  CHECK(slow_link.pipeline_ms ==
        doctest::Approx(slow_link.stages[0].time_ms + slow_link.stages[1].time_ms +
                        8 * slow_link.boundary_ms));
}

TEST_CASE(
    "a mixed cluster file with an unknown section, twin group names, a nested mixed file or no "
    "groups is refused by name") {
  auto refused = [](const std::string& text, const std::string& what) {
    std::string err;
    try {
      plan::parse_mixed_cluster(text, "m.toml", kClusters);
    } catch (const ConfigError& e) {
      err = e.what();
    }
    INFO(err);
    CHECK(err.find(what) != std::string::npos);
  };
  const std::string group =
      "[[group]]\nname = \"a\"\ncluster = \"this-machine-core.toml\"\nnodes = 1\n";
  refused("[cluster]\nname = \"m\"\n" + group + "[betwen]\n",
          "unknown section 'betwen' in a mixed cluster file; did you mean 'between'?");
  refused("[cluster]\nname = \"m\"\n" + group + group, "two [[group]]s are named 'a'");
  refused(
      "[cluster]\nname = \"m\"\n[[group]]\nname = \"a\"\ncluster = "
      "\"this-machine-halved.toml\"\nnodes = 1\n",
      "is itself a mixed cluster");
  refused("[cluster]\nname = \"m\"\n", "lists its node groups as [[group]] tables");
  refused("[cluster]\nname = \"m\"\n" + group + group.substr(0, group.find("name")) +
              "name = \"b\"\ncluster = \"h100-sxm.toml\"\nnodes = 1\n",
          "[between] bandwidth_gbps is missing");
  CHECK_THROWS_WITH_AS(plan::load_cluster(kClusters / "this-machine-halved.toml"),
                       doctest::Contains("it is a mixed cluster"), ConfigError);
}

TEST_CASE("every shipped mixed cluster file loads, each group with its node kind's figures") {
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kClusters)) {
    if (entry.path().extension() != ".toml" || !plan::has_groups(entry.path())) continue;
    INFO(entry.path());
    const plan::MixedCluster m = plan::load_mixed_cluster(entry.path());
    CHECK(m.groups.size() >= 2);
    CHECK(m.between.bandwidth > 0);
    for (const plan::NodeGroupKind& g : m.groups)
      CHECK(std::max(g.cluster.peak("bf16"), g.cluster.peak("fp32")) > 0);
    ++files;
  }
  CHECK(files >= 2);  // this-machine-halved, h100-a100-mixed
}
