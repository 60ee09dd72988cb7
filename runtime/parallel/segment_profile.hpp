// Per-segment timing of one transformer layer (norms, GEMMs, attention, each collective) and the
// bytes each collective moved: what `[run] profile_layer = true` prints and bench/tp_layer reads.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace loom {

class SegmentProfile {
 public:
  struct Row {
    std::string name;
    double ms = 0;
    int64_t calls = 0, collectives = 0, bytes = 0;
  };

  // Only the profiled layer marks; `active` is true while it runs.
  bool active = false;
  // Evaluation and sampling forwards are not training steps: while paused nothing is counted,
  // so the table divides training time by training steps.
  bool paused = false;

  void begin() { last_ = Clock::now(); }
  // Closes the segment that started at the previous mark under `name`.
  void mark(const char* name) {
    auto now = Clock::now();
    if (paused) {
      last_ = now;
      pending_collectives_ = pending_bytes_ = 0;
      return;
    }
    Row& r = row(name);
    r.ms += std::chrono::duration<double, std::milli>(now - last_).count();
    ++r.calls;
    r.collectives += pending_collectives_;
    r.bytes += pending_bytes_;
    pending_collectives_ = pending_bytes_ = 0;
    last_ = now;
  }
  // A collective in the current segment moved `n` bytes (the whole buffer, as nccl-tests count).
  void collective(int64_t n) {
    if (!active || paused) return;
    ++pending_collectives_;
    pending_bytes_ += n;
  }
  const std::vector<Row>& rows() const { return rows_; }
  void clear() { rows_.clear(); }

 private:
  using Clock = std::chrono::steady_clock;
  Row& row(const char* name) {
    for (auto& r : rows_)
      if (r.name == name) return r;
    rows_.push_back({name});
    return rows_.back();
  }
  std::vector<Row> rows_;
  Clock::time_point last_;
  int64_t pending_collectives_ = 0, pending_bytes_ = 0;
};

}  // namespace loom
