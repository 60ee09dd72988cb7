// DDP equivalence: the same global batch on 1, 2 and 4 ranks trains the same model.
#include <doctest/doctest.h>

#include "support/layouts.hpp"

using namespace loom::test;

TEST_CASE("ddp on 2 and 4 ranks matches the single-rank run: loss and grad norm, 10 steps, 1e-5") {
  LayoutRuns runs("preset = \"tiny\"\nseq_len = 32",
                  "steps = 10\nglobal_batch = 8\nmicro_batch = 1\nlr = 3e-3\nwarmup_steps = 2",
                  "[plugins.ddp]\nbucket_mb = 0.05\n");  // several buckets
  Curves one = runs.run("--set parallel.nproc=1");
  REQUIRE(one.loss.size() == 10);
  CHECK(one.loss.back() < one.loss.front());
  check_same(one, runs.run("--set parallel.nproc=2"), 1e-5, "dp=2");
  check_same(one, runs.run("--set parallel.nproc=4"), 1e-5, "dp=4");
}

TEST_CASE("bucket_mb = 0 sizes ddp's buckets from the measured dp link, the same on every rank") {
  LayoutRuns runs("preset = \"tiny\"\nseq_len = 32",
                  "steps = 4\nglobal_batch = 8\nmicro_batch = 1\nlr = 3e-3");
  const Curves fixed = runs.run("--set parallel.nproc=2");
  const Curves measured = runs.run("--set parallel.nproc=2 --set plugins.ddp.bucket_mb=0");
  // Two ranks sum a + b whatever the buckets: the same bits.
  check_same(fixed, measured, 0.0, "measured buckets, dp = 2");
  CHECK(measured.out.find("ddp measured the dp link: ") != std::string::npos);
  CHECK(measured.out.find("KiB keep latency under a tenth of each") != std::string::npos);
  check_same(fixed, runs.run("--set parallel.nproc=4 --set plugins.ddp.bucket_mb=0"), 1e-5,
             "measured buckets, dp = 4");
  const auto bad = runs.raw("--set parallel.nproc=2 --set plugins.ddp.bucket_mb=-1");
  CHECK(bad.rc != 0);
  CHECK(bad.out.find("bucket_mb must be positive, or 0 to size buckets from the measured link") !=
        std::string::npos);
}
