#include "train/metrics.hpp"

#include <cmath>
#include <cstdio>

#include "core/errors.hpp"
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
    : out_(file, append ? std::ios::app : std::ios::trunc) {
  if (!out_) throw RuntimeError("cannot write metrics file '" + file.string() + "'");
}

void MetricsLog::write(const std::vector<std::pair<std::string, double>>& fields) {
  std::string line = "{";
  for (size_t i = 0; i < fields.size(); ++i) {
    line += (i ? ", " : "") + json_quote(fields[i].first) + ": " + json_number(fields[i].second);
  }
  out_ << line << "}\n";
  out_.flush();
}

}  // namespace loom::train
