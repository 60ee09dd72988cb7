#include "core/cgroup.hpp"

#include <fstream>

namespace loom {

std::string own_cgroup(const std::string& root) {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("0::", 0) == 0) return root + line.substr(3);
  return root;
}

double tightest_limit(const std::string& root, const std::string& file, LimitReader read) {
  double tightest = 0;
  for (std::string dir = own_cgroup(root); dir.size() >= root.size();
       dir = dir.substr(0, dir.rfind('/'))) {
    std::ifstream in(dir + "/" + file);
    const double limit = in ? read(in) : 0;
    if (limit > 0 && (tightest == 0 || limit < tightest)) tightest = limit;
    if (dir == root || dir.rfind('/') == std::string::npos) break;
  }
  return tightest;
}

}  // namespace loom
