// ABI 3's step context and data hooks, through the two examples built on them
// (sdk/examples/local-sgd-data and sdk/examples/stochastic-bf16-precision): local SGD's replicas
// diverge between averages and are compared at every sync, and stochastic rounding draws its bits
// from loom.step, so a resumed run draws what the uninterrupted one drew.
#include <doctest/doctest.h>

#include <numeric>

#include "support/layouts.hpp"

using namespace loom::test;
namespace fs = std::filesystem;

namespace {
bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}
const char* kModel = "n_layer = 2\nn_head = 4\nd_model = 32\nd_ff = 64\nseq_len = 16";
double mean_last(const std::vector<double>& v, size_t n) {
  REQUIRE(v.size() >= n);
  return std::accumulate(v.end() - static_cast<std::ptrdiff_t>(n), v.end(), 0.0) / double(n);
}
}  // namespace

TEST_CASE(
    "local SGD at dp 2 with k = 4: its replicas are compared at every sync step and nowhere else, "
    "the run ends well, and its last 5 of 40 steps' mean loss is within 2% of ddp's") {
  // 8 sequences per replica: with 2 its noisier gradients put it 2.7% above ddp (Xeon, measured).
  LayoutRuns runs(kModel, "steps = 40\nglobal_batch = 16\nlr = 3e-3\nwarmup_steps = 2");
  const Curves ddp = runs.run("--set parallel.nproc=2");
  const Curves local = runs.run("--set parallel.nproc=2 --set plugins.data=local_sgd");
  const std::vector<double> checked = column(local.metrics, "replica_check");
  REQUIRE(checked.size() == 40);
  for (size_t i = 0; i < checked.size(); ++i) {
    INFO("step " << i + 1);
    CHECK(checked[i] == ((i + 1) % 4 == 0 ? 1.0 : 0.0));
  }
  CHECK(local.loss != ddp.loss);  // the replicas did train apart between averages
  const double got = mean_last(local.loss, 5), want = mean_last(ddp.loss, 5);
  INFO("local SGD " << got << ", ddp " << want);
  CHECK(std::abs(got - want) <= 0.02 * want);
}

TEST_CASE(
    "local SGD's validate hook reads [train] steps through loom.config: a k that does not divide "
    "it is refused by config check, before any rank starts") {
  LayoutRuns runs(kModel, "steps = 10\nglobal_batch = 4");
  auto r =
      run_loom("config check --no-data " + runs.config() +
               " --set parallel.nproc=2 --set plugins.data=local_sgd --set plugins.local_sgd.k=4");
  INFO(r.out);
  CHECK(r.rc == 2);
  CHECK(has(r.out, "[plugins.local_sgd] k = 4 does not divide train.steps = 10"));
  auto save =
      run_loom("config check --no-data " + runs.config() +
               " --set parallel.nproc=2 --set plugins.data=local_sgd --set plugins.local_sgd.k=5"
               " --set plugins.ckpt=sync --set checkpoint.every=4");
  CHECK(save.rc == 2);
  CHECK(has(save.out, "does not divide checkpoint.every = 4"));
  auto ok =
      run_loom("config check --no-data " + runs.config() +
               " --set parallel.nproc=2 --set plugins.data=local_sgd --set plugins.local_sgd.k=5");
  CHECK(ok.rc == 0);
}

TEST_CASE(
    "stochastic rounding seeded from loom.step: it moves the loss off round-to-nearest, follows "
    "[run] seed, and resumes bitwise") {
  LayoutRuns runs(kModel, "steps = 8\nglobal_batch = 4\nlr = 3e-3\nwarmup_steps = 2");
  const Curves sr = runs.run("--set plugins.precision=sr_bf16");
  CHECK(sr.loss.size() == 8);
  CHECK(sr.loss != runs.run("--set plugins.precision=bf16").loss);
  CHECK(sr.loss != runs.run("--set plugins.precision=sr_bf16 --set run.seed=7").loss);
  CHECK(sr.loss == runs.run("--set plugins.precision=sr_bf16").loss);  // the same draws
  const std::string common =
      "--set plugins.precision=sr_bf16 --set plugins.ckpt=sync "
      "--set checkpoint.every=4";
  REQUIRE(runs.raw(common + " --set train.exit_after=4").rc == 0);
  auto resumed = runs.raw(common + " --set checkpoint.resume=latest");
  INFO(resumed.out);
  REQUIRE(resumed.rc == 0);
  check_bitwise(sr, {column(runs.raw_dir() / "metrics.jsonl", "loss"),
                     column(runs.raw_dir() / "metrics.jsonl", "grad_norm"),
                     {},
                     {}});
}
