#include "train/trace.hpp"

#include "core/json.hpp"

#include <cstdio>
#include <fstream>

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

Trace::~Trace() {
  std::error_code ec;
  std::filesystem::create_directories(path_.parent_path(), ec);
  std::ofstream out(path_);
  out << "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  out << "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": " << rank_
      << ", \"tid\": 0, \"args\": {\"name\": \"" << label_ << "\"}}";
  char buf[64];
  for (const Span& s : spans_) {
    out << ",\n{\"name\": " << json_quote(s.name) << ", \"cat\": " << json_quote(s.category)
        << ", \"ph\": \"X\", \"pid\": " << rank_ << ", \"tid\": 0";
    std::snprintf(buf, sizeof buf, ", \"ts\": %.3f, \"dur\": %.3f}", s.ts_us, s.dur_us);
    out << buf;
  }
  out << "\n]}\n";
}

}  // namespace loom::train
