#include "train/metrics.hpp"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "core/errors.hpp"
#include "core/files.hpp"
#include "core/json.hpp"
#include "report/tensorboard.hpp"

namespace loom::train {

Memory process_memory() {
  Memory m;
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    long long kb = 0;
    if (std::sscanf(line.c_str(), "VmRSS: %lld kB", &kb) == 1) m.rss_bytes = kb * 1024;
    if (std::sscanf(line.c_str(), "VmHWM: %lld kB", &kb) == 1) m.peak_bytes = kb * 1024;
  }
  return m;
}

MetricsLog::MetricsLog(const std::filesystem::path& file, bool append,
                       const std::filesystem::path& tensorboard)
    : file_(file), out_(file, append ? std::ios::app : std::ios::trunc) {
  if (!out_)
    throw RuntimeError("cannot write metrics file '" + file.string() +
                       "': " + std::strerror(errno));
  if (!tensorboard.empty()) tensorboard_ = std::make_unique<report::TensorBoardWriter>(tensorboard);
}

MetricsLog::~MetricsLog() = default;

void MetricsLog::write(const std::vector<std::pair<std::string, double>>& fields) {
  std::string line = "{";
  for (size_t i = 0; i < fields.size(); ++i) {
    line += (i ? ", " : "") + json_quote(fields[i].first) + ": " + json_number(fields[i].second);
  }
  errno = 0;
  out_ << line << "}\n";
  out_.flush();
  if (!out_)
    throw RuntimeError("writing '" + file_.string() +
                       "' failed: " + (errno ? std::strerror(errno) : "I/O error"));
  if (tensorboard_) tensorboard_->write(fields);
}

int64_t drop_rows_from(const std::filesystem::path& file, int64_t first_step,
                       const std::filesystem::path& superseded) {
  std::error_code ec;
  if (!std::filesystem::exists(file, ec)) return 0;
  const std::string text = read_file(file, "metrics file");
  std::string kept, moved;
  int64_t dropped = 0;
  for (size_t at = 0; at < text.size();) {
    size_t nl = text.find('\n', at);
    if (nl == std::string::npos) nl = text.size();  // a last line the dead run left half-written
    const std::string line = text.substr(at, nl - at);
    at = nl + 1;
    long long step = -1;
    const bool whole = !line.empty() && line.back() == '}';
    if (whole && std::sscanf(line.c_str(), "{\"step\": %lld", &step) == 1 && step < first_step)
      kept += line + "\n";
    else if (!line.empty())
      ++dropped, moved += line + "\n";
  }
  if (dropped == 0) return 0;
  std::ofstream out(superseded,
                    std::ios::app);  // first: a failure below leaves both copies, never none
  out << moved;
  out.flush();
  if (!out) throw RuntimeError("cannot write '" + superseded.string() + "'" + os_reason());
  write_file(file, kept, "metrics file");
  return dropped;
}

std::string eta_suffix(double elapsed_s, int64_t done, int64_t left) {
  if (done < 1 || left < 1) return "";
  const double eta = elapsed_s / static_cast<double>(done) * static_cast<double>(left);
  if (elapsed_s + eta < 60) return "";
  const auto s = static_cast<int64_t>(eta + 0.5);
  char b[48];
  if (s >= 3600)
    std::snprintf(b, sizeof b, " | eta %lldh%02lldm", (long long)(s / 3600),
                  (long long)(s / 60 % 60));
  else
    std::snprintf(b, sizeof b, " | eta %lldm%02llds", (long long)(s / 60), (long long)(s % 60));
  return b;
}

void write_checked(const std::filesystem::path& file, const std::string& text) {
  write_file(file, text, "file");
}

}  // namespace loom::train
