// A finished (or running) run as its files tell it: metrics.jsonl (one flat object of numbers per
// step, null for a non-finite value) and events.jsonl (what [stability] saw). What `loom
// compare` and `loom doctor` read.
#pragma once

#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace loom::report {

struct StepRow {
  std::map<std::string, double> v;  // NaN where the file says null
  double get(const std::string& key) const {
    auto it = v.find(key);
    return it == v.end() ? NAN : it->second;
  }
  bool has(const std::string& key) const { return v.count(key) != 0; }
};

struct EventRow {
  int64_t step = 0;
  std::string layer, event;
  std::string line;  // the whole JSON object, for details
  // The raw JSON text of one field ("[2826, 7667]", "\"h1\"", "4.5"), or "".
  std::string field(const std::string& key) const;
};

struct Run {
  std::filesystem::path dir;
  std::vector<StepRow> steps;  // step 1 onwards, one row per step
  // Rows a resume wrote again: a run resumed before Loom dropped the stopped run's rows past its
  // checkpoint repeats those steps; the later rows are kept.
  int64_t superseded_rows = 0;
  double initial_val_loss = NAN;  // step 0's line: the validation loss before the first update
  std::vector<EventRow> events;
  std::vector<double> peak_mem_per_rank;  // from ranks.json, written at the end of a run
  // From links.json (several hosts only): each host's link to rank 0's host, in MB/s.
  std::string links_to;
  std::vector<std::pair<std::string, double>> links;
  // Mean of `key` over steps [from, end) that have a finite value; NaN when none.
  double mean(const std::string& key, size_t from = 0) const;
  double max(const std::string& key) const;
  // The last finite value of `key`, or NaN.
  double last(const std::string& key) const;
};

// Reads DIR/metrics.jsonl (required) and DIR/events.jsonl (when present). Throws RuntimeError
// naming the file and line when a line is not what Loom writes.
Run read_run(const std::filesystem::path& dir);

}  // namespace loom::report
