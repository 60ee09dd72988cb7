// Per-step metrics: one JSON object per line in <run dir>/metrics.jsonl.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace loom::report {
class TensorBoardWriter;
}

namespace loom::train {

// Resident and peak resident memory of this process, from /proc/self/status.
struct Memory {
  int64_t rss_bytes = 0, peak_bytes = 0;
};
Memory process_memory();

class MetricsLog {
 public:
  // Truncates for a new run; a resumed run appends to what it continues. With `tensorboard`, the
  // same lines also go to TensorBoard events in that directory.
  MetricsLog(const std::filesystem::path& file, bool append,
             const std::filesystem::path& tensorboard = {});
  ~MetricsLog();
  // Appends {"k": v, ...}; values are numbers, written with enough digits to round-trip.
  void write(const std::vector<std::pair<std::string, double>>& fields);

 private:
  std::filesystem::path file_;
  std::ofstream out_;
  std::unique_ptr<report::TensorBoardWriter> tensorboard_;
};

// A resumed run continues after step `first_step` - 1: the rows of `file` from `first_step` on were
// written by the run that died after its checkpoint, and the resumed run writes those steps
// again. They move to `superseded` (appended: the spike or NaN that stopped the run stays
// readable), and `file` is rewritten whole without them, so it has one row per step. Returns how
// many moved.
int64_t drop_rows_from(const std::filesystem::path& file, int64_t first_step,
                       const std::filesystem::path& superseded);

// " | eta 12m05s" for a step line: `left` steps at the mean time of the `done` ones so far
// (evaluations and checkpoints included); empty for a run shorter than a minute, and at its last
// step.
std::string eta_suffix(double elapsed_s, int64_t done, int64_t left);

// Writes `text` to `file` (truncating), or throws naming the file and the OS's reason: a full disk
// must fail the run, not leave it half-written and "done".
void write_checked(const std::filesystem::path& file, const std::string& text);

}  // namespace loom::train
