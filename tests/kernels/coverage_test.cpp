// Every __global__ function in the tree has a harness case: the kernel cases are run (this
// executable again, without this case) with LOOM_KERNEL_LOG set, and each kernel found in the
// sources must be among the names the harness launched.
#include <doctest/doctest.h>

#include <filesystem>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "support/process.hpp"

namespace fs = std::filesystem;

namespace {

// name -> the file that defines it, for every __global__ function under the source folders.
std::set<std::pair<std::string, std::string>> kernels_in_sources() {
  // __global__ [static] [__launch_bounds__(...)] void [__launch_bounds__(...)] name(
  const std::regex global(
      R"(__global__\s+(?:static\s+)?(?:__launch_bounds__\s*\([^)]*\)\s*)?void\s+)"
      R"((?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)\s*\()");
  std::set<std::pair<std::string, std::string>> found;
  for (const char* dir : {"runtime", "plugins", "models", "sdk"}) {
    for (const auto& e : fs::recursive_directory_iterator(fs::path(LOOM_SOURCE_DIR) / dir)) {
      const std::string ext = e.path().extension().string();
      if (!e.is_regular_file() ||
          (ext != ".cu" && ext != ".cuh" && ext != ".hpp" && ext != ".h" && ext != ".cpp"))
        continue;
      const std::string text = loom::test::read_text(e.path());
      for (std::sregex_iterator m(text.begin(), text.end(), global), end; m != end; ++m)
        found.insert({(*m)[1].str(), fs::relative(e.path(), LOOM_SOURCE_DIR).string()});
    }
  }
  return found;
}

}  // namespace

TEST_CASE("every __global__ kernel in the tree runs in a harness case") {
  const auto kernels = kernels_in_sources();
  REQUIRE(kernels.size() >= 20);  // the scan finds the tree's kernels at all
  std::set<std::string> names;
  for (const auto& k : kernels) {
    CAPTURE(k.second);
    CHECK_MESSAGE(names.insert(k.first).second,
                  k.first << " is defined twice: the log could not tell them apart");
  }
  loom::test::TempDir dir;
  const fs::path log = dir.path / "launched.txt";
  const auto run =
      loom::test::sh("LOOM_KERNEL_LOG=" + log.string() + " /proc/" + std::to_string(getpid()) +
                     "/exe --test-case-exclude='every __global__ kernel*' --no-version");
  REQUIRE(run.rc == 0);
  std::set<std::string> launched;
  std::istringstream lines(loom::test::read_text(log));
  for (std::string name; std::getline(lines, name);)
    launched.insert(name.substr(0, name.find('<')));
  for (const auto& [name, file] : kernels) {
    CAPTURE(file);
    CHECK_MESSAGE(launched.count(name) == 1,
                  name << " (" << file << ") has no case in tests/kernels");
  }
}

// The kernels that must not contend on an address: attention, the norms, the column sums (norm
// and bias gradients) and the reductions (amax, sum of squares) use no atomic at all.
TEST_CASE("the attention, norm, column-sum and reduction kernels use no atomics") {
  for (const char* file : {"attention.cuh", "norms.cuh", "columns.cuh", "reductions.cuh"}) {
    CAPTURE(file);
    std::istringstream text(
        loom::test::read_text(fs::path(LOOM_SOURCE_DIR) / "runtime/ops/cuda/kernels" / file));
    std::string code;
    for (std::string line; std::getline(text, line);)
      code += line.substr(0, line.find("//")) + "\n";
    REQUIRE(code.size() > 500);
    CHECK(code.find("atomic") == std::string::npos);
  }
}
