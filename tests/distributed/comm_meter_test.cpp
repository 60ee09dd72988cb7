// The comm meter: every slot's traffic is counted, whichever plugin or runtime part issued it,
// through the watched comm table. Before it, only the data plugin reported its communication,
// so a tp = 2 run logged comm_ms 0.
#include <doctest/doctest.h>

#include "support/layouts.hpp"
#include "support/metrics.hpp"

using namespace loom::test;

namespace {

// The value of `key` on each step, which every step of the run must have.
std::vector<double> each_step(const Curves& c, const std::string& key, size_t steps) {
  const std::vector<double> v = column(c.metrics, key);
  INFO(key << "\n" << c.out);
  REQUIRE(v.size() == steps);
  return v;
}

}  // namespace

TEST_CASE(
    "every slot's traffic is metered: dp's bytes follow its wire dtype, tp and pp report theirs, "
    "one rank sends none") {
  constexpr size_t kSteps = 3;
  LayoutRuns runs(
      "n_layer = 2\nn_head = 4\nd_model = 32\nd_ff = 64\nvocab_size = 256\nseq_len = 16",
      "steps = 3\nglobal_batch = 4\nmicro_batch = 1");
  const Curves one = runs.run("--set parallel.nproc=1");
  for (double b : each_step(one, "comm_bytes_all", kSteps)) CHECK(b == 0);

  // ddp all-reduces every gradient once per step: S = 4 bytes per parameter, 2 with bf16 wires.
  // The dp group also carries a few scalars (the loss's mean over the data ranks).
  const Curves dp = runs.run("--set parallel.nproc=2");
  const Curves dp_bf16 = runs.run("--set parallel.nproc=2 --set plugins.ddp.reduce_dtype=bf16");
  const std::vector<double> fp32 = each_step(dp, "comm_bytes_dp", kSteps),
                            bf16 = each_step(dp_bf16, "comm_bytes_dp", kSteps);
  const std::vector<double> comm = each_step(dp, "comm_ms", kSteps),
                            exposed = each_step(dp, "exposed_comm_ms", kSteps);
  for (size_t s = 0; s < kSteps; ++s) {
    CHECK(fp32[s] > 0);
    CHECK(fp32[s] == fp32[0]);
    const double half_gradients = fp32[s] - bf16[s];  // 2 bytes per parameter
    CHECK(half_gradients > 0);
    CHECK(fp32[s] - 2 * half_gradients >= 0);
    CHECK(fp32[s] - 2 * half_gradients < 64);
    CHECK(exposed[s] >= 0);
    CHECK(exposed[s] <=
          comm[s] + 1e-9);  // the training thread waits only while something is in flight
  }

  // tp's all-reduces inside forward and backward: blocking, so exposed.
  const Curves tp = runs.run("--set parallel.nproc=2 --set parallel.tp=2");
  const std::vector<double> tp_bytes = each_step(tp, "comm_bytes_tp", kSteps),
                            tp_exposed = each_step(tp, "exposed_comm_ms_tp", kSteps);
  const std::vector<double> total_exposed = each_step(tp, "exposed_comm_ms", kSteps);
  for (size_t s = 0; s < kSteps; ++s) {
    CHECK(tp_bytes[s] > 0);
    CHECK(tp_exposed[s] > 0);
    CHECK(total_exposed[s] >= tp_exposed[s]);
  }
  // The data plugin's own count says whose it is: no field named comm_bytes reads 0 beside a tp
  // run's traffic.
  CHECK(column(tp.metrics, "comm_bytes").empty());
  CHECK(each_step(tp, "data_comm_bytes", kSteps).size() == kSteps);

  // pp's activations and gradients between the stages; their receives also wait out the bubble,
  // so they are pp_wait_ms, not exposed communication.
  const Curves pp = runs.run("--set parallel.nproc=2 --set parallel.pp=2");
  const std::vector<double> pp_bytes = each_step(pp, "comm_bytes_pp", kSteps),
                            pp_wait = each_step(pp, "pp_wait_ms", kSteps);
  for (size_t s = 0; s < kSteps; ++s) {
    CHECK(pp_bytes[s] > 0);
    CHECK(pp_wait[s] >= 0);
  }
  CHECK(column(pp.metrics, "exposed_comm_ms_pp").empty());
}
