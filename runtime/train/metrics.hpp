// Per-step metrics: one JSON object per line in <run dir>/metrics.jsonl.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace loom::train {

// Resident and peak resident memory of this process, from /proc/self/status.
struct Memory {
  int64_t rss_bytes = 0, peak_bytes = 0;
};
Memory process_memory();

class MetricsLog {
 public:
  // Truncates for a new run; a resumed run appends to what it continues.
  MetricsLog(const std::filesystem::path& file, bool append);
  // Appends {"k": v, ...}; values are numbers, written with enough digits to round-trip.
  void write(const std::vector<std::pair<std::string, double>>& fields);

 private:
  std::ofstream out_;
};

}  // namespace loom::train
