// Pipeline parallelism: every schedule and layout matches the single-rank fp32 run; the first
// stage's activations in flight follow each schedule's bound; traces are valid trace-event JSON;
// a pipeline checkpoint loads into one rank; shapes that cannot run fail once, before launch.
#include <doctest/doctest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "support/layouts.hpp"

using namespace loom::test;

namespace {

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Six blocks: eight pipeline layers, enough for pp = 4 x 2 chunks. Eight micro-batches per step.
const char* kModel =
    "n_layer = 6\nn_head = 4\nd_model = 32\nd_ff = 64\nvocab_size = 130\nseq_len = 16";
const char* kTrain = "steps = 10\nglobal_batch = 8\nmicro_batch = 1\nlr = 3e-3\nwarmup_steps = 2";

}  // namespace

TEST_CASE(
    "pp = 2 and pp = 4 under gpipe, 1f1b and interleaved match the single-rank run: 10 steps, "
    "1e-5") {
  LayoutRuns runs(kModel, kTrain);
  Curves one = runs.run("--set parallel.nproc=1");
  REQUIRE(one.loss.size() == 10);
  CHECK(one.loss.back() < one.loss.front());
  for (const char* schedule : {"gpipe", "1f1b", "interleaved"})
    for (int pp : {2, 4}) {
      const std::string layout = "--set parallel.nproc=" + std::to_string(pp) +
                                 " --set parallel.pp=" + std::to_string(pp) +
                                 " --set plugins.pipeline=" + schedule;
      Curves got = runs.run(layout);
      check_same(one, got, 1e-5, layout);
      // The first stage's activations in flight: all 8 under gpipe, at most pp under 1f1b.
      auto in_flight = column(got.metrics, "pipeline_in_flight");
      REQUIRE(!in_flight.empty());
      if (std::string(schedule) == "gpipe") CHECK(in_flight.back() == 8);
      if (std::string(schedule) == "1f1b") CHECK(in_flight.back() == pp);
      // With one chunk per rank the peak activations are that many micro-batches' worth.
      const double held = column(got.metrics, "pipeline_activation_bytes").back();
      const double one = column(got.metrics, "activation_bytes").back();
      if (std::string(schedule) != "interleaved") CHECK(held == in_flight.back() * one);
      CHECK(held > 0);
      CHECK(has(got.out, std::string("pipeline: ") + schedule));
    }
}

TEST_CASE(
    "an uneven layout, pp x dp, pp x tp, pp x dp x tp on 8 ranks and an untied head match too") {
  LayoutRuns runs(kModel, kTrain);
  Curves one = runs.run("--set parallel.nproc=1");
  const char* layouts[] = {
      "--set parallel.nproc=2 --set parallel.pp=2 --set parallel.pp_layout='E t t t t | t t L'",
      "--set parallel.nproc=4 --set parallel.pp=2 --set parallel.dp=2",
      "--set parallel.nproc=4 --set parallel.pp=2 --set parallel.tp=2",
      "--set parallel.nproc=8 --set parallel.pp=2 --set parallel.dp=2 --set parallel.tp=2 --set "
      "plugins.sequence=sp",
  };
  for (const char* layout : layouts) {
    Curves got = runs.run(layout);
    check_same(one, got, 1e-5, layout);
    if (has(layout, "pp_layout"))
      CHECK(has(got.out, "1f1b, 2 stages x 1 chunk, 8 micro-batches: E t t t t | t t L"));
  }

  LayoutRuns untied(std::string(kModel) + "\ntied_embeddings = false", kTrain);
  check_same(
      untied.run("--set parallel.nproc=1"),
      untied.run("--set parallel.nproc=2 --set parallel.pp=2 --set plugins.pipeline=interleaved"),
      1e-5, "untied, interleaved pp = 2");
}

TEST_CASE("validation loss, a trace per rank, and a pipeline checkpoint that one rank resumes") {
  LayoutRuns runs(kModel, kTrain);
  Curves one = runs.run("--set train.eval_every=5");
  TempDir t;
  const std::string ck = (t.path / "ck").string();
  Curves pipe = runs.run(
      "--set parallel.nproc=4 --set parallel.pp=4 --set plugins.pipeline=interleaved "
      "--set train.eval_every=5 --set run.trace=true --set plugins.ckpt=sync "
      "--set checkpoint.every=5 --set checkpoint.dir=" +
      ck);
  check_same(one, pipe, 1e-5, "interleaved pp = 4");
  auto val_one = column(one.metrics, "val_loss"), val_pipe = column(pipe.metrics, "val_loss");
  REQUIRE(val_one.size() == 4);  // before the first update, steps 1, 5, 10
  REQUIRE(val_pipe.size() == 4);
  for (size_t i = 0; i < 4; ++i) CHECK(val_pipe[i] == doctest::Approx(val_one[i]).epsilon(1e-5));

  // Each rank's trace: every step runs 8 micro-batches x 2 chunks forward and backward.
  for (int r = 0; r < 4; ++r) {
    auto path = pipe.metrics.parent_path() / "trace" / ("rank" + std::to_string(r) + ".json");
    std::ifstream in(path);
    REQUIRE(in.good());
    auto doc = nlohmann::json::parse(in);
    int forward = 0, backward = 0, steps = 0;
    for (const auto& e : doc["traceEvents"]) {
      if (e["ph"] != "X") continue;
      CHECK(e["dur"].get<double>() >= 0);
      forward += e["cat"] == "forward";
      backward += e["cat"] == "backward";
      steps += e["cat"] == "step" && e["name"].get<std::string>().rfind("step ", 0) == 0;
    }
    CHECK(steps == 10);
    CHECK(forward == 10 * 16);
    CHECK(backward == 10 * 16);
  }

  // The pipeline's checkpoint at step 5 continues on one rank as the pipeline went on.
  Curves resumed = runs.run("--set checkpoint.resume=" + ck + "/step-00000005");
  REQUIRE(resumed.loss.size() == 5);
  for (size_t s = 0; s < 5; ++s) {
    INFO("step " << s + 6);
    CHECK(resumed.loss[s] == doctest::Approx(pipe.loss[s + 5]).epsilon(1e-5));
    CHECK(resumed.grad_norm[s] == doctest::Approx(pipe.grad_norm[s + 5]).epsilon(1e-5));
  }
}

TEST_CASE("a pipeline that cannot run fails once, before any rank starts, saying why") {
  LayoutRuns runs(kModel, kTrain);
  auto odd = runs.raw(
      "--set parallel.nproc=4 --set parallel.pp=4 --set plugins.pipeline=interleaved "
      "--set train.global_batch=6");
  CHECK(odd.rc == 2);
  CHECK(has(odd.out, "multiple of pp: 6 micro-batches"));
  CHECK(!has(odd.out, "[rank"));  // the launcher refused it; no rank ran
  auto deep = runs.raw(
      "--set parallel.nproc=4 --set parallel.pp=4 --set plugins.pipeline=interleaved --set "
      "parallel.pp_chunks=3");
  CHECK(deep.rc == 2);
  CHECK(has(deep.out, "8 pipeline layers (embedding, blocks, head), fewer than the 12 stages"));
  auto layout = runs.raw(
      "--set parallel.nproc=2 --set parallel.pp=2 --set parallel.pp_layout='E t t | t t L'");
  CHECK(layout.rc == 2);
  CHECK(has(layout.out, "layer 5 is 't' in the model, not 'L'"));
}

TEST_CASE("text samples under pp = 2, interleaved pp and tp+sp read as on one rank") {
  LayoutRuns runs(kModel, kTrain);
  // Bytes: a 256-token vocabulary needs no tokenizer to print.
  const std::string greedy = std::string(" --set model.vocab_size=256") + kGreedySample;
  const std::string one = sample_text(runs.run("--set parallel.nproc=1" + greedy).out, 10);
  CHECK(one.size() > 40);
  for (const char* layout :
       {"--set parallel.nproc=2 --set parallel.pp=2 --set train.micro_batch=1",
        "--set parallel.nproc=2 --set parallel.pp=2 --set train.micro_batch=1 --set "
        "plugins.pipeline=interleaved",
        "--set parallel.nproc=2 --set parallel.tp=2 --set plugins.sequence=sp"}) {
    INFO(layout);
    CHECK(sample_text(runs.run(std::string(layout) + greedy).out, 10) == one);
  }
}

// Megatron's scatter/gather between stages (the schedules' scatter_gather option, on by default):
// under tp without sp every tp rank holds the stage's output whole, so each sends 1/tp of it and
// the next stage all-gathers the slices. The same values arrive, so the run is bitwise the one
// that sends them whole, with 1/tp of the bytes between stages; a text sample's prompt, whose
// length tp need not divide, crosses whole and reads as on one rank.
TEST_CASE(
    "pp x tp with scatter/gather sends 1/tp of the activations between stages and trains bitwise "
    "as without") {
  LayoutRuns runs(std::string(kModel) + "\ntied_embeddings = false",
                  "steps = 3\nglobal_batch = 4\nmicro_batch = 1\nlr = 3e-3");
  const std::string layout = "--set parallel.nproc=4 --set parallel.pp=2 --set parallel.tp=2";
  const Curves whole = runs.run(layout + " --set plugins.1f1b.scatter_gather=false");
  const Curves sliced = runs.run(layout);
  check_same(whole, sliced, 0.0, "scatter/gather on");
  const std::vector<double> whole_bytes = column(whole.metrics, "comm_bytes_pp"),
                            sliced_bytes = column(sliced.metrics, "comm_bytes_pp");
  REQUIRE(whole_bytes.size() == 3);
  REQUIRE(sliced_bytes.size() == 3);
  for (size_t s = 0; s < 3; ++s) {
    CHECK(sliced_bytes[s] > 0);
    CHECK(whole_bytes[s] - 2 * sliced_bytes[s] <
          64);  // the loss's sum over pp rides along (8 bytes)
    CHECK(whole_bytes[s] - 2 * sliced_bytes[s] >= -64);
  }
  const std::string greedy = std::string(" --set model.vocab_size=256") + kGreedySample;
  LayoutRuns text(kModel, kTrain);
  const std::string one = sample_text(text.run("--set parallel.nproc=1" + greedy).out, 10);
  CHECK(sample_text(text.run(layout + greedy).out, 10) == one);
}

// ZB-H1 keeps 1F1B's order of forwards and input-gradient backwards and runs every weight half in
// micro-batch order, so each gradient sums the same terms in the same order: bitwise 1f1b.
TEST_CASE(
    "zbh1 splits every backward and trains bitwise as 1f1b, and with ZeRO, tp+sp, MoE and "
    "recompute within 1e-5 of one rank") {
  LayoutRuns runs(kModel, kTrain);
  const Curves one = runs.run("--set parallel.nproc=1");
  for (int pp : {2, 4}) {
    const std::string layout =
        "--set parallel.nproc=" + std::to_string(pp) + " --set parallel.pp=" + std::to_string(pp);
    const Curves f1b = runs.run(layout + " --set plugins.pipeline=1f1b");
    const Curves zb = runs.run(layout + " --set plugins.pipeline=zbh1");
    check_same(f1b, zb, 0.0, "zbh1 against 1f1b, pp = " + std::to_string(pp));
    CHECK(has(zb.out, "pipeline: zbh1, " + std::to_string(pp) + " stages x 1 chunk"));
    // As many micro-batches hold their whole activations as under 1f1b; the weight halves keep
    // their GEMMs' operands on top.
    CHECK(column(zb.metrics, "pipeline_in_flight").back() == pp);
    CHECK(column(zb.metrics, "pipeline_activation_bytes").back() >
          column(f1b.metrics, "pipeline_activation_bytes").back());
  }
  const char* layouts[] = {
      "--set parallel.nproc=4 --set parallel.pp=2 --set plugins.data=zero2",
      "--set parallel.nproc=4 --set parallel.pp=2 --set plugins.data=zero3",
      "--set parallel.nproc=4 --set parallel.pp=2 --set parallel.tp=2 --set plugins.sequence=sp",
      "--set parallel.nproc=2 --set parallel.pp=2 --set model.recompute=full",
  };
  for (const char* layout : layouts)
    check_same(one, runs.run(std::string(layout) + " --set plugins.pipeline=zbh1"), 1e-5, layout);
  // bf16 rounds the GEMM operands in the input half, before they are set aside: bitwise 1f1b.
  const std::string bf16 =
      "--set parallel.nproc=2 --set parallel.pp=2 --set plugins.precision=bf16";
  check_same(runs.run(bf16 + " --set plugins.pipeline=1f1b"),
             runs.run(bf16 + " --set plugins.pipeline=zbh1"), 0.0, "bf16 zbh1 against bf16 1f1b");
  // Experts' GEMMs stay in the input half; routing and the auxiliary losses as on one rank.
  LayoutRuns moe(
      "preset = \"llama-tiny\"\nseq_len = 16\n[model.moe]\nexperts = 4\ntop_k = 2\nevery = 2",
      "steps = 6\nglobal_batch = 4\nmicro_batch = 1\nlr = 1e-3");
  check_same(moe.run("--set parallel.nproc=1"),
             moe.run("--set parallel.nproc=4 --set parallel.pp=2 --set parallel.ep=2 --set "
                     "plugins.pipeline=zbh1"),
             1e-5, "MoE llama-tiny pp2 x ep2 under zbh1");
}
