// Reading a run's metrics.jsonl in tests.
#pragma once

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

namespace loom::test {

// Every value of `key` in a metrics.jsonl file, in order.
inline std::vector<double> column(const std::filesystem::path& file, const std::string& key) {
  std::ifstream in(file);
  std::string line;
  std::vector<double> out;
  std::regex re("\"" + key + "\": ([-0-9.e+]+)");
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_search(line, m, re)) out.push_back(std::stod(m[1]));
  }
  return out;
}

}  // namespace loom::test
