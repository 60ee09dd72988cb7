// DDP equivalence: the same global batch on 1, 2 and 4 ranks trains the same model.
#include <doctest/doctest.h>

#include <cmath>

#include "support/metrics.hpp"
#include "support/process.hpp"

using loom::test::column;
using loom::test::run_loom;
using loom::test::TempDir;

TEST_CASE("ddp on 2 and 4 ranks matches the single-rank run: loss and grad norm, 10 steps, 1e-5") {
  TempDir t;
  std::string text;
  for (int i = 0; i < 500; ++i) text += "data parallel training should not change the numbers " + std::to_string(i % 13) + "\n";
  t.write("c.txt", text);
  REQUIRE(run_loom("data prepare --text " + (t.path / "c.txt").string() + " --out " + (t.path / "d").string()).rc == 0);
  std::string cfg = t.write("e.toml", "[run]\nthreads = 1\npeak_gflops = 10\n[model]\npreset = \"tiny\"\nseq_len = 32\n"
                                      "[data]\ndir = \"" + (t.path / "d").string() + "\"\n"
                                      "[train]\nsteps = 10\nglobal_batch = 8\nmicro_batch = 1\nlr = 3e-3\n"
                                      "warmup_steps = 2\neval_every = 0\n"
                                      "[plugins.ddp]\nbucket_mb = 0.05\n");  // several buckets
  std::vector<std::vector<double>> loss, gnorm;
  for (int n : {1, 2, 4}) {
    std::string dir = (t.path / ("run" + std::to_string(n))).string();
    auto r = run_loom("train " + cfg + " --run-dir " + dir + " --set parallel.nproc=" + std::to_string(n));
    INFO(r.out);
    REQUIRE(r.rc == 0);
    loss.push_back(column(std::filesystem::path(dir) / "metrics.jsonl", "loss"));
    gnorm.push_back(column(std::filesystem::path(dir) / "metrics.jsonl", "grad_norm"));
    REQUIRE(loss.back().size() == 10);
    if (n > 1) CHECK(column(std::filesystem::path(dir) / "metrics.jsonl", "comm_ms").size() == 10);
  }
  for (size_t k = 1; k < loss.size(); ++k)
    for (size_t s = 0; s < 10; ++s) {
      INFO("layout " << k << " step " << s + 1);
      CHECK(std::fabs(loss[k][s] - loss[0][s]) <= 1e-5 * std::fabs(loss[0][s]));
      CHECK(std::fabs(gnorm[k][s] - gnorm[0][s]) <= 1e-5 * std::fabs(gnorm[0][s]));
    }
  CHECK(loss[0].back() < loss[0].front());
}
