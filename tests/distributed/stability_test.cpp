// [stability] against injected faults, each named where it happened, and `loom doctor` reading
// the run afterwards: a NaN in one layer's gradient, a corrupted batch, a rank whose parameters
// drifted off its replicas.
#include <doctest/doctest.h>

#include <fstream>
#include <sstream>

#include "support/layouts.hpp"

using namespace loom::test;

namespace {
bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}
std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}
const char* kModel =
    "n_layer = 2\nn_head = 4\nd_model = 32\nd_ff = 64\nvocab_size = 130\nseq_len = 16";
}  // namespace

TEST_CASE(
    "a NaN in one layer's gradient is named, the step skipped on every rank, the weights kept") {
  LayoutRuns runs(kModel, "steps = 6\nglobal_batch = 4\nlr = 3e-3\nwarmup_steps = 1");
  Curves c = runs.run(
      "--set parallel.nproc=2 --set faults.nan_grad_step=4 --set "
      "faults.nan_grad_param=h1.mlp.fc.w");
  CHECK(has(c.out, "step 4: non-finite gradient"));
  CHECK(has(c.out, "first in layer h1, parameter h1.mlp.fc.w; update skipped"));
  CHECK(column(c.metrics, "skipped") == std::vector<double>{0, 0, 0, 1, 0, 0});
  std::vector<double> norm = column(c.metrics, "param_norm");
  CHECK(norm[3] == norm[2]);
  CHECK(norm[4] != norm[3]);
  const std::string events = slurp(c.metrics.parent_path() / "events.jsonl");
  CHECK(has(events, "{\"step\": 4, \"layer\": \"numeric\", \"event\": \"nonfinite\""));
  CHECK(has(events, "\"param\": \"h1.mlp.fc.w\""));
  auto doc = run_loom("doctor " + c.metrics.parent_path().string());
  CHECK(doc.rc == 0);
  CHECK(
      has(doc.out, "step 4: non-finite value, first in parameter \"h1.mlp.fc.w\" (layer \"h1\")"));
  // Six steps at check_every = 100: the replica checks never ran, and doctor says so.
  CHECK(has(doc.out, "--    data-parallel replicas not checked (no step ran it"));
  CHECK(has(doc.out, "--    check collective not run (no step ran it"));
  auto typo = runs.raw("--set faults.nan_grad_step=4 --set faults.nan_grad_param=h1.mlp.fc.x");
  CHECK(typo.rc == 2);
  CHECK(has(typo.out, "did you mean 'h1.mlp.fc.w'?"));
}

TEST_CASE(
    "a corrupted batch is caught as a spike, logged with its samples, and optionally skipped") {
  LayoutRuns runs(kModel, "steps = 24\nglobal_batch = 4\nlr = 3e-3\nwarmup_steps = 2");
  const std::string sets =
      "--set faults.bad_batch_step=20 --set stability.min_steps=5 --set stability.window=10";
  Curves logged = runs.run(sets);
  CHECK(has(logged.out, "step 20: spike"));
  CHECK(has(logged.out, "update applied. Batch: global samples 0..3 at token offsets ["));
  const std::string events = slurp(logged.metrics.parent_path() / "events.jsonl");
  CHECK(has(events, "{\"step\": 20, \"layer\": \"data\", \"event\": \"spike\""));
  CHECK(has(events, "\"samples\": [0, 1, 2, 3]"));
  CHECK(has(events, "\"layer_grad_norms\": {\"embedding\": "));
  CHECK(events.find("spike", events.find("spike") + 1) == std::string::npos);  // that batch alone
  Curves skipped = runs.run(sets + " --set stability.action=skip");
  CHECK(column(skipped.metrics, "skipped")[19] == 1.0);
  CHECK(column(skipped.metrics, "param_norm")[19] == column(skipped.metrics, "param_norm")[18]);
  auto doc = run_loom("doctor " + logged.metrics.parent_path().string());
  CHECK(has(doc.out, "LOOK  step 20: spike"));
  CHECK(has(doc.out, "read the batch: global samples [0, 1, 2, 3] start at token offsets ["));
}

TEST_CASE(
    "a bad batch while the loss still falls fast is flagged at its own step, and later spikes name "
    "it") {
  // Default settings (a 50-step window): early in training the window's spread is wide, so only
  // the step-to-step jump score finds step 18.
  LayoutRuns runs(kModel, "steps = 24\nglobal_batch = 4\nlr = 3e-3\nwarmup_steps = 2");
  Curves c = runs.run("--set faults.bad_batch_step=18");
  INFO(c.out);
  CHECK(has(c.out, "step 18: spike"));
  const std::string events = slurp(c.metrics.parent_path() / "events.jsonl");
  CHECK(has(events, "{\"step\": 18, \"layer\": \"data\", \"event\": \"spike\""));
  std::istringstream lines(events);
  for (std::string line; std::getline(lines, line);) {
    if (!has(line, "\"spike\"")) continue;
    const int step = std::stoi(line.substr(line.find(':') + 1));
    INFO(line);
    CHECK(step >= 18);
    if (step <= 20)
      CHECK(has(line, "\"batch_step\": 18"));  // the update of step 18's batch, not theirs
  }
  auto doc = run_loom("doctor " + c.metrics.parent_path().string());
  CHECK(has(doc.out, "LOOK  step 18: spike"));
}

TEST_CASE("a rank whose parameters drift off its replicas is named by the replica checksum") {
  LayoutRuns runs(kModel, "steps = 6\nglobal_batch = 6\nlr = 3e-3\nwarmup_steps = 1");
  auto r = runs.raw(
      "--set parallel.nproc=3 --set faults.perturb_step=3 --set faults.perturb_rank=1 "
      "--set stability.check_every=1");
  INFO(r.out);
  CHECK(r.rc == 1);
  CHECK(has(
      r.out,
      "step 3: data-parallel replicas' parameters differ: rank 1 differs from the other replicas"));
  CHECK(has(r.out, "the data plugin 'ddp' keeps them equal after every step"));
  CHECK(has(slurp(runs.raw_dir() / "events.jsonl"),
            "{\"step\": 3, \"layer\": \"communication\", \"event\": \"replica_mismatch\", "
            "\"ranks\": \"rank 1\"}"));
  CHECK(has(run_loom("doctor " + runs.raw_dir().string()).out,
            "LOOK  step 3: replicas' parameters differ: \"rank 1\""));
  // Past the last periodic check the end of the run still compares them; check_every = 0 and
  // enabled = false mean no comparison at all, as [stability] documents.
  auto at_end = runs.raw(
      "--set parallel.nproc=3 --set faults.perturb_step=3 --set faults.perturb_rank=1 "
      "--set stability.check_every=100");
  INFO(at_end.out);
  CHECK(at_end.rc == 1);
  CHECK(has(at_end.out, "data-parallel replicas' parameters differ at the end of the run: rank 1"));
  for (const char* off : {"--set stability.check_every=0", "--set stability.enabled=false"}) {
    auto quiet = runs.raw(
        std::string(
            "--set parallel.nproc=3 --set faults.perturb_step=3 --set faults.perturb_rank=1 ") +
        off);
    INFO(off << "\n" << quiet.out);
    CHECK(quiet.rc == 0);
    CHECK_FALSE(has(quiet.out, "replicas' parameters differ"));
  }
  // Healthy replicas pass the same check every step, and the check collective agrees.
  Curves ok = runs.run("--set parallel.nproc=3 --set stability.check_every=1");
  CHECK(slurp(ok.metrics.parent_path() / "events.jsonl").empty());
  auto doc = run_loom("doctor " + ok.metrics.parent_path().string());
  CHECK(has(doc.out, "ok    no data-parallel replica mismatch"));
  CHECK(has(doc.out, "ok    no check collective came out wrong"));
  CHECK(has(doc.out, "ok    no non-finite loss or gradient"));
}
