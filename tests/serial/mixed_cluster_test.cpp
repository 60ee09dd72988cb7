// A mixed cluster on one machine: two namespace nodes (scripts/local-cluster.sh), node0 held to
// half a core (`slow node0 0.5`, a CPU cgroup quota). The planner, given the cluster file of that
// machine (clusters/this-machine-halved.toml over a fresh one-core calibration), puts the slow
// group first and gives it fewer layers; the run of its emitted config must train as one rank
// does, beat the devices-alike split by at least 25% (median step), and land within 20% of its
// prediction. In the serial binary: it times steps, and a calibration needs the machine alone.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "cluster/local_cluster.hpp"
#include "support/layouts.hpp"
#include "support/metrics.hpp"

using namespace loom;
using namespace loom::test;

namespace {

// The median step of a run, its first two (warm-up) left out.
double median_step(const std::filesystem::path& metrics) {
  std::vector<double> t = column(metrics, "step_ms");
  REQUIRE(t.size() > 4);
  t.erase(t.begin(), t.begin() + 2);
  std::nth_element(t.begin(), t.begin() + long(t.size() / 2), t.end());
  return t[t.size() / 2];
}

Curves train_on(const LocalCluster& cluster, const std::string& config, const std::filesystem::path& dir, const std::string& sets) {
  const std::vector<Result> r = cluster.loom_on_nodes("train " + config + " --run-dir " + dir.string() + " " + sets);
  for (size_t k = 0; k < r.size(); ++k) {
    INFO("node" << k << ":\n" << r[k].out);
    REQUIRE(r[k].rc == 0);
  }
  return {column(dir / "metrics.jsonl", "loss"), column(dir / "metrics.jsonl", "grad_norm"), dir / "metrics.jsonl", r[0].out};
}

}  // namespace

TEST_CASE("a mixed cluster with one node at half speed: the planner's uneven layout trains as one rank, beats the uniform split by 25% and meets its prediction") {
  LayoutRuns runs("n_layer = 6\nn_head = 4\nd_model = 192\nseq_len = 128\nvocab_size = 256", "steps = 10\nglobal_batch = 32");
  const Curves one = runs.run("");
  TempDir t;
  // The groups' node kind, measured now: one one-thread rank on a core of this machine.
  const Result cal = run_loom("plan calibrate --cores 1 --max-ranks 1 --name this-machine-core --out " + (t.path / "this-machine-core.toml").string());
  INFO(cal.out);
  REQUIRE(cal.rc == 0);
  std::filesystem::copy_file(std::string(LOOM_SOURCE_DIR) + "/clusters/this-machine-halved.toml", t.path / "halved.toml");
  const std::string halved = (t.path / "halved.toml").string(), emitted = (t.path / "mixed.toml").string();

  const Result plan = run_loom("plan " + runs.config() + " --cluster " + halved + " --top 3");
  INFO(plan.out);
  REQUIRE(plan.rc == 0);
  CHECK(plan.out.find("groups in node order: slow fast") != std::string::npos);  // the head goes to the fast group
  REQUIRE(run_loom("plan " + runs.config() + " --cluster " + halved + " --emit 1 --out " + emitted).rc == 0);
  CHECK(read_text(emitted).find("groups = [ 'slow nodes=1', 'fast nodes=1' ]") != std::string::npos);

  LocalCluster cluster(2);
  REQUIRE(cluster.script("slow node0 0.5").rc == 0);
  const Curves uneven = train_on(cluster, emitted, t.path / "uneven", "");
  const Curves uniform = train_on(cluster, emitted, t.path / "uniform", "--set parallel.pp_layout=");
  check_same(one, uneven, 1e-5, "the planner's uneven split");
  check_same(one, uniform, 1e-5, "the uniform split");

  const double fast = median_step(uneven.metrics), slow = median_step(uniform.metrics);
  const std::vector<double> predicted_ms = column(t.path / "uneven" / "plan.json", "predicted_step_ms");
  REQUIRE(predicted_ms.size() == 1);
  const double predicted = predicted_ms[0];
  MESSAGE("median step: uneven " << fast << " ms, uniform " << slow << " ms (" << 100 * (1 - fast / slow) << "% faster); predicted " << predicted
                                   << " ms (" << 100 * (fast / predicted - 1) << "%)");
  INFO(uneven.out);
  CHECK(fast <= 0.75 * slow);
  CHECK(std::fabs(fast / predicted - 1) <= 0.20);
  CHECK(uneven.out.find("groups: slow: node 0 (rank 0, stage 0); fast: node 1 (rank 1, stage 1)") != std::string::npos);

  // The uniform split's slow stage shows in its metrics and in loom doctor.
  const std::vector<double> stage0 = column(uniform.metrics, "stage0_compute_ms"), stage1 = column(uniform.metrics, "stage1_compute_ms");
  REQUIRE(stage0.size() == stage1.size());
  CHECK(stage0.back() > 1.5 * stage1.back());
  const Result doctor = run_loom("doctor " + (t.path / "uniform").string());
  INFO(doctor.out);
  CHECK(doctor.out.find("LOOK  stage 0 computes") != std::string::npos);
  CHECK(cluster.left_on("node0").empty());
  CHECK(cluster.left_on("node1").empty());
}
