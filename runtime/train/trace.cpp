#include "train/trace.hpp"

#include <cstdio>

#include "core/files.hpp"
#include "core/json.hpp"

namespace loom::train {

namespace {

double micros(Trace::Clock::time_point t) {
  return std::chrono::duration<double, std::micro>(t.time_since_epoch()).count();
}

}  // namespace

Trace::Trace(std::filesystem::path path, int rank, std::string label)
    : path_(std::move(path)), rank_(rank), label_(std::move(label)) {}

void Trace::span(const std::string& name, const std::string& category, Clock::time_point begin,
                 Clock::time_point end) {
  std::lock_guard<std::mutex> lock(m_);
  spans_.push_back({name, category, micros(begin), micros(end) - micros(begin)});
}

void Trace::write() {
  std::lock_guard<std::mutex> lock(m_);
  written_ = true;
  std::string out =
      "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n{\"name\": \"process_name\", \"ph\": "
      "\"M\", \"pid\": " +
      std::to_string(rank_) + ", \"tid\": 0, \"args\": {\"name\": \"" + label_ + "\"}}";
  char buf[64];
  for (const Span& s : spans_) {
    out += ",\n{\"name\": " + json_quote(s.name) + ", \"cat\": " + json_quote(s.category) +
           ", \"ph\": \"X\", \"pid\": " + std::to_string(rank_) + ", \"tid\": 0";
    std::snprintf(buf, sizeof buf, ", \"ts\": %.3f, \"dur\": %.3f}", s.ts_us, s.dur_us);
    out += buf;
  }
  std::error_code ec;
  std::filesystem::create_directories(path_.parent_path(), ec);
  write_file(path_, out + "\n]}\n", "trace");
}

Trace::~Trace() {
  if (written_) return;
  try {  // a run that failed still leaves its timeline, if the disk allows
    write();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "loom: %s\n", e.what());
  }
}

}  // namespace loom::train
