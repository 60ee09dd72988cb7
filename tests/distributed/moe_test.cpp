// The MoE model across layouts: pp cuts between blocks, dp splits a micro-batch's tokens with
// routing statistics gathered over the ranks, and ep spreads the experts with tokens sent to
// them by all-to-all; every layout matches the single-rank run with capacity dropping (and
// dropless) and the auxiliary losses.
#include <doctest/doctest.h>

#include "support/layouts.hpp"

using namespace loom::test;

namespace {
const char* kBlocks =
    "n_layer = 4\nn_head = 4\nd_model = 32\nd_ff = 64\nvocab_size = 130\nseq_len = 16\n";
const std::string kModel = std::string(kBlocks) +
                           "[model.moe]\nexperts = 4\ntop_k = 2\nevery = 2\ncapacity_factor = "
                           "1.0\naux_coef = 0.01\nz_coef = 0.001";
bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}
}  // namespace

TEST_CASE(
    "a MoE model under pp = 2 and pp = 4 matches the single-rank run, dropping the same tokens") {
  LayoutRuns runs(kModel,
                  "steps = 10\nglobal_batch = 4\nmicro_batch = 2\nlr = 3e-3\nwarmup_steps = 2");
  Curves one = runs.run("--set parallel.nproc=1");
  REQUIRE(one.loss.size() == 10);
  CHECK(one.loss.back() < one.loss.front());
  auto dropped = column(one.metrics, "moe.h1.dropped");
  CHECK(dropped.front() > 0);  // capacity 1.0 with top-2 routing drops some assignments
  for (const char* layout :
       {"--set parallel.nproc=2 --set parallel.pp=2",
        "--set parallel.nproc=2 --set parallel.pp=2 --set plugins.pipeline=interleaved",
        "--set parallel.nproc=4 --set parallel.pp=4 --set plugins.pipeline=gpipe"})
    check_same(one, runs.run(layout), 1e-5, layout);
}

TEST_CASE(
    "a MoE model under ddp and ZeRO at dp = 2 and 4 matches: capacity and aux over the whole "
    "micro-batch") {
  // One micro-batch per step, split over the dp ranks: routing gathers its statistics over them,
  // so the same assignments are dropped and the same load-balancing loss is paid.
  LayoutRuns runs(kModel, "steps = 10\nglobal_batch = 4\nlr = 3e-3\nwarmup_steps = 2");
  Curves one = runs.run("--set parallel.nproc=1");
  CHECK(column(one.metrics, "moe.h1.dropped").front() > 0);
  for (const char* layout :
       {"--set parallel.nproc=2", "--set parallel.nproc=4 --set plugins.data=zero2",
        "--set parallel.nproc=2 --set plugins.data=zero3"}) {
    Curves got = runs.run(layout);
    check_same(one, got, 1e-5, layout);
    check_same_routing(one, got, "h1");
    check_same_routing(one, got, "h3");
  }
}

TEST_CASE("MoE settings that cannot work are config errors") {
  LayoutRuns runs(kModel, "steps = 1\nglobal_batch = 2");
  auto topk = runs.raw("--set model.moe.top_k=5");
  CHECK(topk.rc == 2);
  CHECK(has(topk.out, "top_k = 5 is more than experts = 4"));
  auto cap = runs.raw("--set model.moe.capacity_factor=0");
  CHECK(cap.rc == 2);
  CHECK(has(cap.out, "capacity_factor = 0.000000 must be positive"));
  auto typo = runs.raw("--set model.moe.topk=2");
  CHECK(typo.rc == 2);
  CHECK(has(typo.out, "did you mean 'top_k'"));
  auto uneven = runs.raw("--set parallel.nproc=3 --set parallel.ep=3");
  CHECK(uneven.rc == 2);
  CHECK(has(uneven.out, "experts = 4 is not a multiple of [parallel] ep = 3"));
  auto dense = runs.raw("--set parallel.nproc=2 --set parallel.ep=2 --set model.moe.experts=0");
  CHECK(dense.rc == 2);
  CHECK(has(dense.out, "ep = 2 needs a mixture-of-experts model"));
  auto batch = runs.raw("--set parallel.nproc=4 --set parallel.ep=4 --set train.global_batch=2");
  CHECK(batch.rc == 2);
  CHECK(has(batch.out, "global_batch = 2 is not a multiple of dp x ep = 4"));
  auto old = runs.raw("--set parallel.nproc=2 --set parallel.ep=2 --set plugins.data=ddp12");
  CHECK(old.rc == 2);
  CHECK(has(old.out,
            "ddp12\" does not declare LOOM_DATA_EXPERTS (it was built against plugin ABI 1.2, "
            "before plugins declared capabilities)"));
  auto sp = runs.raw("--set parallel.nproc=2 --set parallel.tp=2 --set plugins.sequence=sp");
  CHECK(sp.rc == 2);
  CHECK(has(sp.out, "Loom replicates experts over tp, so every tp rank routes the same full rows"));
}

TEST_CASE(
    "expert parallelism (ep = 2, 4, with dp, tp, pp and ZeRO-1) matches the single-rank run") {
  // One micro-batch of 4 sequences per step: each of the dp x ep ranks routes its share, sends
  // the rows to the experts' ranks and gets the outputs back; capacity is the micro-batch's.
  LayoutRuns runs(kModel, "steps = 10\nglobal_batch = 4\nlr = 3e-3\nwarmup_steps = 2");
  Curves one = runs.run("--set parallel.nproc=1");
  CHECK(column(one.metrics, "moe.h1.dropped").front() > 0);
  for (const char* layout :
       {"--set parallel.nproc=2 --set parallel.ep=2", "--set parallel.nproc=4 --set parallel.ep=4",
        "--set parallel.nproc=4 --set parallel.ep=2",
        "--set parallel.nproc=4 --set parallel.ep=2 --set parallel.tp=2",
        "--set parallel.nproc=4 --set parallel.ep=2 --set plugins.data=zero1"}) {
    Curves got = runs.run(layout);
    check_same(one, got, 1e-5, layout);
    CHECK(column(got.metrics, "moe.h1.dropped") == column(one.metrics, "moe.h1.dropped"));
    CHECK(column(got.metrics, "moe.h3.load.2") == column(one.metrics, "moe.h3.load.2"));
    CHECK(column(got.metrics, "moe.h1.all_to_all_ms").front() > 0);
  }
  Curves dropless = runs.run("--set model.moe.dropless=true");
  CHECK(column(dropless.metrics, "moe.h1.dropped").front() == 0);
  for (const char* layout :
       {"--set parallel.nproc=4 --set parallel.ep=4 --set model.moe.dropless=true",
        "--set parallel.nproc=4 --set parallel.ep=2 --set parallel.pp=2 --set "
        "model.moe.dropless=true"})
    check_same(dropless, runs.run(layout), 1e-5, layout);
  // The parameters outside the experts are replicas across ep ranks too: drift there is caught.
  auto drift = runs.raw(
      "--set parallel.nproc=2 --set parallel.ep=2 --set faults.perturb_step=2 --set "
      "faults.perturb_rank=1");
  CHECK(drift.rc != 0);
  CHECK(has(drift.out, "replicas' parameters differ"));
  CHECK(has(drift.out, "ranks 0 and 1 disagree"));
}

TEST_CASE("an expert-parallel checkpoint holds every expert once and resumes in other layouts") {
  LayoutRuns runs(kModel, "steps = 10\nglobal_batch = 4\nlr = 3e-3\nwarmup_steps = 2");
  TempDir t;
  const std::string ck = (t.path / "ck").string(), step5 = ck + "/step-00000005";
  Curves full = runs.run(
      "--set parallel.nproc=4 --set parallel.ep=2 --set plugins.ckpt=sync "
      "--set checkpoint.every=5 --set checkpoint.dir=" +
      ck);
  // dp rank 0 of each ep rank writes its experts; ep rank 0 also the rest of the model.
  auto inspect = run_loom("ckpt inspect " + step5);
  INFO(inspect.out);
  CHECK(has(inspect.out, "rank-00000.bin"));
  CHECK(has(inspect.out, "rank-00001.bin"));
  CHECK(!has(inspect.out, "rank-00002.bin"));
  CHECK(has(inspect.out, "h1.moe.fc.w "));
  CHECK(run_loom("ckpt verify " + step5).rc == 0);
  for (const char* layout :
       {"--set parallel.nproc=1", "--set parallel.nproc=4 --set parallel.ep=4",
        "--set parallel.nproc=2 --set parallel.ep=2 --set plugins.data=zero3"}) {
    Curves c = runs.run(std::string(layout) + " --set checkpoint.resume=" + step5);
    REQUIRE(c.loss.size() == 5);
    for (size_t s = 0; s < 5; ++s) {
      INFO(layout << ", step " << s + 6);
      CHECK(c.loss[s] == doctest::Approx(full.loss[s + 5]).epsilon(1e-5));
      CHECK(c.grad_norm[s] == doctest::Approx(full.grad_norm[s + 5]).epsilon(1e-5));
    }
  }
}
