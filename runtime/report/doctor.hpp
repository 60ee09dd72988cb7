// `loom doctor RUN_DIR`: what a run's metrics and events say, in four layers — data (spikes and
// the batches behind them), numeric (non-finite values, overflow skips, fp8 saturation),
// communication (replica mismatches, exposed communication), hardware (collectives that came out
// wrong, step-time outliers, memory growth) — each with where to look next.
#pragma once

#include <string>

#include "report/runs.hpp"

namespace loom::report {

struct Diagnosis {
  std::string text;
  int findings = 0;  // lines that ask for a look (not "ok")
};

Diagnosis diagnose(const Run& run);

}  // namespace loom::report
