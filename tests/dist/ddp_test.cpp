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
