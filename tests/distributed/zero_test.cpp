// ZeRO: zero1/2/3 match the single-rank fp32 run at dp = 2 and 4, and zero3 composes with tp and
// pp; each rank's model-state bytes follow the ZeRO formulas (loom plan's too) and its traffic the
// 2Ψ / 3Ψ volumes;
// what cannot exist with ZeRO is refused before training.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "plan/estimate.hpp"
#include "support/layouts.hpp"

using namespace loom::test;

namespace {

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

const char* kModel =
    "n_layer = 4\nn_head = 4\nd_model = 32\nd_ff = 64\nvocab_size = 130\nseq_len = 16";

double last(const Curves& c, const std::string& key) { return column(c.metrics, key).back(); }

void near(double got, double want, double rtol, const std::string& what) {
  INFO(what << ": " << got << " vs " << want);
  CHECK(std::fabs(got - want) <= rtol * want);
}

}  // namespace

TEST_CASE("zero1, zero2 and zero3 at dp = 2 and dp = 4 match the single-rank run: 10 steps, 1e-5") {
  // Two micro-batches per rank at dp = 2: stages 2 and 3 reduce every micro-batch's gradients.
  LayoutRuns runs(kModel,
                  "steps = 10\nglobal_batch = 8\nmicro_batch = 2\nlr = 3e-3\nwarmup_steps = 2");
  Curves one = runs.run("--set parallel.nproc=1");
  REQUIRE(one.loss.size() == 10);
  CHECK(one.loss.back() < one.loss.front());
  for (const char* stage : {"zero1", "zero2", "zero3"})
    for (int dp : {2, 4}) {
      const std::string layout =
          "--set parallel.nproc=" + std::to_string(dp) + " --set plugins.data=" + stage;
      check_same(one, runs.run(layout), 1e-5, layout);
    }
}

TEST_CASE("zero3 with tp = 2 and with pp = 2 (untied and tied embeddings) matches too") {
  LayoutRuns runs(std::string(kModel) + "\ntied_embeddings = false",
                  "steps = 10\nglobal_batch = 8\nmicro_batch = 2\nlr = 3e-3\nwarmup_steps = 2");
  Curves one = runs.run("--set parallel.nproc=1");
  const char* layouts[] = {
      "--set parallel.nproc=4 --set parallel.tp=2 --set plugins.data=zero3",
      "--set parallel.nproc=4 --set parallel.pp=2 --set plugins.data=zero3",
      "--set parallel.nproc=4 --set parallel.pp=2 --set plugins.data=zero2 --set "
      "plugins.pipeline=interleaved",
  };
  for (const char* layout : layouts) check_same(one, runs.run(layout), 1e-5, layout);

  // Tied embeddings: the two copies on the first and last stage are sharded alike and summed
  // piece by piece.
  LayoutRuns tied(kModel,
                  "steps = 10\nglobal_batch = 8\nmicro_batch = 2\nlr = 3e-3\nwarmup_steps = 2");
  Curves tied_one = tied.run("--set parallel.nproc=1");
  for (const char* stage : {"zero1", "zero3"}) {
    const std::string layout =
        std::string("--set parallel.nproc=4 --set parallel.pp=2 --set plugins.data=") + stage;
    check_same(tied_one, tied.run(layout), 1e-5, layout + " (tied)");
  }
}

TEST_CASE("model-state bytes follow the ZeRO formulas and traffic the 2 Psi / 3 Psi volumes") {
  // One micro-batch per rank, so each stage communicates once per step; six blocks so padding
  // and the largest unit stay small next to the model.
  LayoutRuns runs(
      "n_layer = 6\nn_head = 4\nd_model = 64\nd_ff = 256\nvocab_size = 130\nseq_len = 16",
      "steps = 2\nglobal_batch = 4\nlr = 1e-3");
  Curves one = runs.run("--set parallel.nproc=1");
  const double psi = last(one, "param_bytes") / 4;  // parameters on one rank
  CHECK(last(one, "grad_bytes") == 4 * psi);
  CHECK(last(one, "optim_bytes") == 8 * psi);
  for (int n : {2, 4}) {
    const std::string ranks = "--set parallel.nproc=" + std::to_string(n);
    Curves ddp = runs.run(ranks);
    near(last(ddp, "data_comm_bytes"), 2.0 * (n - 1) / n * psi * 4, 1e-9, "ddp all-reduce bytes");
    struct Want {
      const char* stage;
      double params, grads, optim, traffic;
    } wants[] = {
        {"zero1", 4 * psi, 4 * psi, 8 * psi / n, 2.0 * (n - 1) / n * psi * 4},
        {"zero2", 4 * psi, 4 * psi / n, 8 * psi / n, 2.0 * (n - 1) / n * psi * 4},
        {"zero3", 4 * psi / n, 4 * psi / n, 8 * psi / n, 3.0 * (n - 1) / n * psi * 4},
    };
    std::vector<std::string> dirs;
    for (const Want& w : wants) {
      const std::string what = std::string(w.stage) + " at dp = " + std::to_string(n);
      Curves z = runs.run(ranks + " --set plugins.data=" + w.stage);
      near(last(z, "param_bytes"), w.params, 0.05, what + " param bytes");
      near(last(z, "grad_bytes"), w.grads, 0.05, what + " grad bytes");
      near(last(z, "optim_bytes"), w.optim, 0.05, what + " optimizer bytes");
      near(last(z, "data_comm_bytes"), w.traffic, 0.05, what + " bytes sent per step");
      CHECK(last(z, "comm_buffer_bytes") > 0);
      // loom plan's memory model uses the same formulas (fp32: 4 + 4 + 8 bytes, sharded by stage).
      double planned[3];
      loom::plan::model_state_bytes(psi, n, w.stage[4] - '0', false, planned);
      near(last(z, "param_bytes") + last(z, "grad_bytes") + last(z, "optim_bytes"),
           planned[0] + planned[1] + planned[2], 0.05,
           what + " model-state bytes against loom plan's");
      dirs.push_back(z.metrics.parent_path().string());
    }
    // loom compare --cluster puts the planner's figures beside the measured ones.
    auto cmp = run_loom("compare --from-runs " + dirs[0] + " " + dirs[2] + " --cluster " +
                        std::string(LOOM_SOURCE_DIR) + "/clusters/this-machine.toml --out " +
                        dirs[0] + "-cmp");
    INFO(cmp.out);
    CHECK(cmp.rc == 0);
    CHECK(has(cmp.out, "predicted (loom plan)"));
    CHECK(has(cmp.out, "zero1 mb"));
    CHECK(has(cmp.out, "zero3 mb"));
  }
}

TEST_CASE(
    "what cannot exist with ZeRO is a config error before training: zero3 with the perturb fault") {
  // zero3 holds each parameter once over dp, so a perturbed replica has nothing to drift from.
  // (ZeRO with sp, refused here before, trains now: tests/distributed/compositions_test.cpp.)
  LayoutRuns runs(kModel, "steps = 2\nglobal_batch = 4");
  auto z3 = runs.raw("--set parallel.nproc=2 --set plugins.data=zero3 --set faults.perturb_step=1");
  CHECK(z3.rc == 2);
  CHECK(has(z3.out, "zero3 holds each parameter once over dp"));
  CHECK_FALSE(has(z3.out, "step 1/"));
}

TEST_CASE("a ZeRO checkpoint is saved per shard, resumes bitwise, and loads into other layouts") {
  LayoutRuns runs(kModel,
                  "steps = 10\nglobal_batch = 8\nmicro_batch = 2\nlr = 3e-3\nwarmup_steps = 2");
  TempDir t;
  const std::string ck = (t.path / "ck").string(), step5 = ck + "/step-00000005";
  Curves full = runs.run(
      "--set parallel.nproc=2 --set plugins.data=zero2 --set plugins.ckpt=sync "
      "--set checkpoint.every=5 --set checkpoint.dir=" +
      ck);
  // Each dp rank wrote its own pieces: two files of parameters and moments.
  auto inspect = run_loom("ckpt inspect " + step5);
  INFO(inspect.out);
  CHECK(inspect.rc == 0);
  CHECK(has(inspect.out, "rank-00000.bin"));
  CHECK(has(inspect.out, "rank-00001.bin"));
  CHECK(run_loom("ckpt verify " + step5).rc == 0);
  Curves same =
      runs.run("--set parallel.nproc=2 --set plugins.data=zero2 --set checkpoint.resume=" + step5);
  REQUIRE(same.loss.size() == 5);
  for (size_t s = 0; s < 5; ++s) {
    INFO("step " << s + 6);
    CHECK(same.loss[s] == full.loss[s + 5]);
    CHECK(same.grad_norm[s] == full.grad_norm[s + 5]);
  }
  Curves one = runs.run("--set checkpoint.resume=" + step5);
  Curves zero3 =
      runs.run("--set parallel.nproc=4 --set plugins.data=zero3 --set checkpoint.resume=" + step5);
  for (const Curves* c : {&one, &zero3}) {
    REQUIRE(c->loss.size() == 5);
    for (size_t s = 0; s < 5; ++s) {
      INFO("step " << s + 6);
      CHECK(c->loss[s] == doctest::Approx(full.loss[s + 5]).epsilon(1e-5));
      CHECK(c->grad_norm[s] == doctest::Approx(full.grad_norm[s + 5]).epsilon(1e-5));
    }
  }
}

// Stages 1 and 2 gather the updated parameters behind the next forward (gather_overlap, the
// default): the same values arrive, only later, so the run is bitwise the one that gathers at
// the end of the step, its checkpoint included (a save waits for the gathers in flight).
TEST_CASE(
    "zero1 and zero2 with the parameter all-gather behind the next forward train bitwise as "
    "without") {
  LayoutRuns runs(kModel,
                  "steps = 6\nglobal_batch = 8\nmicro_batch = 2\nlr = 3e-3\nwarmup_steps = 2");
  const Curves one = runs.run("--set parallel.nproc=1");
  TempDir t;
  for (const char* zero : {"zero1", "zero2"}) {
    const std::string layout = std::string("--set parallel.nproc=2 --set plugins.data=") + zero;
    const std::string ck = (t.path / zero).string();
    const Curves at_end = runs.run(layout + " --set plugins." + zero + ".gather_overlap=false");
    const Curves behind = runs.run(
        layout + " --set plugins.ckpt=sync --set checkpoint.every=3 --set checkpoint.dir=" + ck);
    check_same(at_end, behind, 0.0, std::string(zero) + ": gathers behind the forward");
    check_same(one, behind, 1e-5, std::string(zero) + " against one rank");
    const Curves resumed = runs.run(layout + " --set checkpoint.resume=" + ck + "/step-00000003");
    REQUIRE(resumed.loss.size() == 3);
    for (size_t s = 0; s < 3; ++s) {
      INFO(zero << ", resumed at step 3: step " << s + 4);
      CHECK(resumed.loss[s] == behind.loss[s + 3]);
      CHECK(resumed.grad_norm[s] == behind.grad_norm[s + 3]);
    }
  }
}

// A deeper prefetch changes when each unit's gather is issued, not what arrives: the same bits,
// and more gathered copies alive at once.
TEST_CASE("zero3 prefetch_depth = 3 trains bitwise as depth 1 and holds more gather buffers") {
  LayoutRuns runs(
      "n_layer = 6\nn_head = 4\nd_model = 64\nd_ff = 256\nvocab_size = 130\nseq_len = 16",
      "steps = 3\nglobal_batch = 4\nlr = 1e-3");
  const std::string layout = "--set parallel.nproc=2 --set plugins.data=zero3";
  const Curves one = runs.run(layout);
  const Curves three = runs.run(layout + " --set plugins.zero3.prefetch_depth=3");
  check_same(one, three, 0.0, "prefetch depth 3");
  CHECK(last(three, "comm_buffer_bytes") > last(one, "comm_buffer_bytes"));
  CHECK(last(three, "data_comm_bytes") == last(one, "data_comm_bytes"));
  const auto bad = runs.raw(layout + " --set plugins.zero3.prefetch_depth=0");
  CHECK(bad.rc == 2);
  CHECK(has(bad.out, "prefetch_depth"));
}

// activation_peak_bytes is measured from the first forward on, less the model state the data
// plugin accounts: sharding the state moves it, not the activations. (Measured from the start of
// the run, ZeRO's setup, which copies the full buffers into its own before releasing them, counted
// as activations.)
TEST_CASE(
    "the measured activation peak is the same under ddp, zero1 and zero3, and at least the "
    "model's own count") {
  LayoutRuns runs(kModel, "steps = 2\nglobal_batch = 8\nlr = 3e-3\nwarmup_steps = 1");
  std::vector<double> peaks;
  for (const char* data : {"ddp", "zero1", "zero3"}) {
    Curves c = runs.run(std::string("--set parallel.nproc=2 --set plugins.data=") + data);
    const double peak = column(c.metrics, "activation_peak_bytes").back();
    INFO(data << ": activation_peak_bytes " << peak);
    CHECK(peak >= column(c.metrics, "activation_bytes").back());
    peaks.push_back(peak);
  }
  for (double p : peaks) CHECK(p == doctest::Approx(peaks[0]).epsilon(0.05));
}
