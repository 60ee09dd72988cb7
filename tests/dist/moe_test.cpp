// The MoE model across the layouts that do not split its experts: pp cuts between blocks, and dp
// splits a micro-batch's tokens with routing statistics gathered over the ranks, so both match
// the single-rank run with capacity dropping and the auxiliary losses.
#include <doctest/doctest.h>

#include "support/layouts.hpp"

using namespace loom::test;

namespace {
const char* kBlocks = "n_layer = 4\nn_head = 4\nd_model = 32\nd_ff = 64\nvocab_size = 130\nseq_len = 16\n";
const std::string kModel = std::string(kBlocks) +
    "[model.moe]\nexperts = 4\ntop_k = 2\nevery = 2\ncapacity_factor = 1.0\naux_coef = 0.01\nz_coef = 0.001";
bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
}  // namespace

TEST_CASE("a MoE model under pp = 2 and pp = 4 matches the single-rank run, dropping the same tokens") {
  LayoutRuns runs(kModel, "steps = 10\nglobal_batch = 4\nmicro_batch = 2\nlr = 3e-3\nwarmup_steps = 2");
  Curves one = runs.run("--set parallel.nproc=1");
  REQUIRE(one.loss.size() == 10);
  CHECK(one.loss.back() < one.loss.front());
  auto dropped = column(one.metrics, "moe.h1.dropped");
  CHECK(dropped.front() > 0);  // capacity 1.0 with top-2 routing drops some assignments
  for (const char* layout : {"--set parallel.nproc=2 --set parallel.pp=2",
                             "--set parallel.nproc=2 --set parallel.pp=2 --set plugins.pipeline=interleaved",
                             "--set parallel.nproc=4 --set parallel.pp=4 --set plugins.pipeline=gpipe"})
    check_same(one, runs.run(layout), 1e-5, layout);
}

TEST_CASE("a MoE model under ddp and ZeRO at dp = 2 and 4 matches: capacity and aux over the whole micro-batch") {
  // One micro-batch per step, split over the dp ranks: routing gathers its statistics over them,
  // so the same assignments are dropped and the same load-balancing loss is paid.
  LayoutRuns runs(kModel, "steps = 10\nglobal_batch = 4\nlr = 3e-3\nwarmup_steps = 2");
  Curves one = runs.run("--set parallel.nproc=1");
  CHECK(column(one.metrics, "moe.h1.dropped").front() > 0);
  for (const char* layout : {"--set parallel.nproc=2", "--set parallel.nproc=4 --set plugins.data=zero2",
                             "--set parallel.nproc=2 --set plugins.data=zero3"}) {
    Curves got = runs.run(layout);
    check_same(one, got, 1e-5, layout);
    CHECK(column(got.metrics, "moe.h1.dropped") == column(one.metrics, "moe.h1.dropped"));
    CHECK(column(got.metrics, "moe.h3.load.0") == column(one.metrics, "moe.h3.load.0"));
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
  auto ep = runs.raw("--set parallel.nproc=2 --set parallel.ep=2");
  CHECK(ep.rc == 2);
  CHECK(has(ep.out, "ep = 2"));
}
