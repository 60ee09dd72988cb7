// A cgroup v2 tree in a temporary directory, for the code that reads this process's limits
// (core/cgroup.hpp): the same path as this process's own cgroup, with the files a test writes.
#pragma once

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace loom::test {

// This process's cgroup path ("/..." from /proc/self/cgroup's "0::" line).
inline std::string own_cgroup_path() {
  std::ifstream in("/proc/self/cgroup");
  std::string line, own = "/";
  while (std::getline(in, line))
    if (line.rfind("0::", 0) == 0) own = line.substr(3);
  return own;
}

// Writes `content` to `file` in `dir` (relative to the fake root: "" for this process's own
// cgroup, or a parent's path such as "/").
inline void fake_cgroup_file(const std::filesystem::path& root, const std::string& dir,
                             const std::string& file, const std::string& content) {
  const std::string where = root.string() + (dir.empty() ? own_cgroup_path() : dir);
  std::filesystem::create_directories(where);
  std::ofstream out(where + "/" + file);
  out << content << "\n";
  out.close();
  REQUIRE(!out.fail());  // a limit the test meant to set, not a missing file read as "none"
}

}  // namespace loom::test
