// Chrome trace-event JSON (the format Perfetto and chrome://tracing read): one file per rank of
// complete ("X") spans, timestamps in microseconds on the machine's steady clock, so files of
// ranks on one machine line up when loaded together.
#pragma once

#include <chrono>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

namespace loom::train {

class Trace {
 public:
  using Clock = std::chrono::steady_clock;
  // `label` names the process row in the viewer ("rank 3 (pp 1)").
  Trace(std::filesystem::path path, int rank, std::string label);
  ~Trace();  // writes the file unless write() did, reporting a failure on stderr
  // Writes the file now; throws RuntimeError naming it and the reason (a full disk).
  void write();
  // Any thread may add spans (plugins trace from their own threads).
  void span(const std::string& name, const std::string& category, Clock::time_point begin,
            Clock::time_point end);

 private:
  struct Span {
    std::string name, category;
    double ts_us, dur_us;
  };
  std::mutex m_;
  std::filesystem::path path_;
  int rank_;
  std::string label_;
  std::vector<Span> spans_;
  bool written_ = false;
};

}  // namespace loom::train
