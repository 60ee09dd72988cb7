// Two runs side by side: the numbers users adopt a layout on (throughput, MFU, step time,
// exposed communication, memory, final loss) and whether they trained the same model (per-step
// loss and grad norm within a relative tolerance, and the first step where they part).
#pragma once

#include <string>
#include <vector>

#include "report/runs.hpp"

namespace loom::report {

struct Comparison {
  std::string name_a, name_b;
  struct Row {
    std::string what;
    double a, b;
    const char* format;  // printf format of one value
    bool higher_is_better;
  };
  std::vector<Row> table;
  std::vector<std::string> notes;                   // settings that differ between the runs
  size_t steps = 0;                                 // steps both runs have
  int64_t diverged_at = 0;                          // first step beyond rtol; 0 = never
  double rtol = 0, worst_loss = 0, worst_grad = 0;  // largest relative differences seen
};

// `notes` lists settings that differ (from the runs' config.toml); rtol judges agreement.
Comparison compare_runs(const std::string& name_a, const Run& a, const std::string& name_b,
                        const Run& b, double rtol, std::vector<std::string> notes);

// The table and the verdict, for the terminal.
std::string describe(const Comparison& c);

// A self-contained HTML page (inline SVG, no scripts, nothing fetched): the table, the verdict,
// loss curves and step-time curves of both runs; `extra` (HTML) goes after the verdict.
std::string html_report(const Comparison& c, const Run& a, const Run& b,
                        const std::string& extra = "");

}  // namespace loom::report
