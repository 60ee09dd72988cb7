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
  std::filesystem::path file_;
  std::ofstream out_;
};

// Writes `text` to `file` (truncating), or throws naming the file and the OS's reason: a full disk
// must fail the run, not leave it half-written and "done".
void write_checked(const std::filesystem::path& file, const std::string& text);

}  // namespace loom::train
