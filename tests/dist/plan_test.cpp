// loom plan against this machine's own runs: the ZeRO formulas against the model-state bytes the
// zero plugins report, and loom compare --cluster. Predicted against measured step times is in
// tests/serial (it needs the machine to itself).
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "config/config.hpp"
#include "gpt/config.hpp"
#include "plan/estimate.hpp"
#include "support/layouts.hpp"

using namespace loom;
using loom::test::LayoutRuns;

TEST_CASE("the zero plugins hold the model-state bytes of the planner's ZeRO formulas (fp32, dp 2)") {
  LayoutRuns runs("n_layer = 2\nn_head = 2\nd_model = 64\nseq_len = 32", "steps = 2\nglobal_batch = 4");
  config::Config cfg = config::Config::load(runs.config());
  cfg.validate_runtime();
  const double psi = double(gpt::from_config(cfg).params());
  std::vector<std::string> dirs;
  for (int stage = 1; stage <= 3; ++stage) {
    auto c = runs.run("--set parallel.nproc=2 --set plugins.data=zero" + std::to_string(stage));
    const double held = test::column(c.metrics, "param_bytes").back() + test::column(c.metrics, "grad_bytes").back() +
                        test::column(c.metrics, "optim_bytes").back();
    double formula[3];
    plan::model_state_bytes(psi, 2, stage, false, formula);
    INFO("zero" << stage << ": runtime " << held << " bytes, formula " << formula[0] + formula[1] + formula[2]);
    // The plugins pad each unit to a multiple of dp; that is all that may differ.
    CHECK(held == doctest::Approx(formula[0] + formula[1] + formula[2]).epsilon(0.01));
    CHECK(test::column(c.metrics, "optim_bytes").back() == doctest::Approx(formula[2]).epsilon(0.01));
    dirs.push_back(c.metrics.parent_path().string());
  }
  // loom compare --cluster puts the planner's figures beside the measured ones.
  auto cmp = test::run_loom("compare --from-runs " + dirs[0] + " " + dirs[2] + " --cluster " + std::string(LOOM_SOURCE_DIR) +
                            "/clusters/this-machine.toml --out " + dirs[0] + "-cmp");
  INFO(cmp.out);
  CHECK(cmp.rc == 0);
  CHECK(cmp.out.find("predicted (loom plan)") != std::string::npos);
  CHECK(cmp.out.find("layouts dp2 zero1 mb2 and dp2 zero3 mb2") != std::string::npos);
}
