#include "train/metrics.hpp"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "core/errors.hpp"
#include "core/files.hpp"
#include "core/json.hpp"

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

MetricsLog::MetricsLog(const std::filesystem::path& file, bool append)
    : file_(file), out_(file, append ? std::ios::app : std::ios::trunc) {
  if (!out_) throw RuntimeError("cannot write metrics file '" + file.string() + "': " + std::strerror(errno));
}

void MetricsLog::write(const std::vector<std::pair<std::string, double>>& fields) {
  std::string line = "{";
  for (size_t i = 0; i < fields.size(); ++i) {
    line += (i ? ", " : "") + json_quote(fields[i].first) + ": " + json_number(fields[i].second);
  }
  errno = 0;
  out_ << line << "}\n";
  out_.flush();
  if (!out_) throw RuntimeError("writing '" + file_.string() + "' failed: " + (errno ? std::strerror(errno) : "I/O error"));
}

void write_checked(const std::filesystem::path& file, const std::string& text) { write_file(file, text, "file"); }

}  // namespace loom::train
