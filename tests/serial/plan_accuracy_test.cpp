// Predicted against measured on this machine, after `loom plan calibrate`
// (bench/plan_accuracy.sh --quick: 5 layouts, 1-2 ranks). In a binary of its own that ctest runs
// alone (RUN_SERIAL).
//
// Memory is checked at the bound (10%) for all five layouts: a peak of bytes allocated,
// which the machine's load does not change. The step-time errors are printed, not checked: they
// move with whatever else runs on the machine (30.9% for tp2 on a busy day against 12% on a quiet
// one), so bench/plan_accuracy.sh reports them, against its targets (docs/plan.md, "Here").
#include <doctest/doctest.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "support/process.hpp"

using namespace loom;

TEST_CASE(
    "after loom plan calibrate, predicted peak memory matches measured runs, and every layout gets "
    "a step-time prediction") {
  const std::string cmd = "bash " + std::string(LOOM_SOURCE_DIR) + "/bench/plan_accuracy.sh " +
                          std::string(LOOM_BINARY_DIR) + " 12 '' --quick";
  const test::Result r = test::sh(cmd);
  INFO(r.out);
  REQUIRE(r.rc == 0);
  std::istringstream lines(r.out);
  std::string line;
  int rows = 0;
  while (std::getline(lines, line)) {
    // "demo     1 dp1 mb16     183.5   192.5   +4.9%   265.6   256.0   -3.6%"
    if (line.rfind("demo", 0) != 0 && line.rfind("llama", 0) != 0) continue;
    std::vector<double> errors;
    std::istringstream words(line);
    for (std::string w; words >> w;)
      if (w.size() > 1 && w.back() == '%') errors.push_back(std::stod(w));
    REQUIRE(errors.size() == 2);
    INFO(line);
    CHECK(std::isfinite(
        errors[0]));  // step time: a prediction, its error printed (see the top of the file)
    CHECK(std::fabs(errors[1]) <= 10.0);  // peak memory per rank
    ++rows;
  }
  CHECK(rows == 5);
}
