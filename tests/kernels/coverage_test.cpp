// Every __global__ function in the tree has a harness case: the kernel cases are run (this
// executable again, without this case) with LOOM_KERNEL_LOG set, and each kernel found in the
// sources must be among the names the harness launched.
#include <doctest/doctest.h>

#include <cctype>
#include <filesystem>
#include <set>
#include <sstream>
#include <string>

#include "support/process.hpp"

namespace fs = std::filesystem;

namespace {

// The name a __global__ declaration at `at` defines: past `static`, `void` and any
// __launch_bounds__(...), the identifier before "(" ("" when the text is not such a declaration).
std::string kernel_name(const std::string& text, size_t at) {
  size_t i = at + std::string("__global__").size();
  auto word = [&] {
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    const size_t from = i;
    while (i < text.size() && (std::isalnum(static_cast<unsigned char>(text[i])) || text[i] == '_'))
      ++i;
    return text.substr(from, i - from);
  };
  for (int tokens = 0; tokens < 4; ++tokens) {
    const std::string w = word();
    if (w == "static" || w == "void") continue;
    if (w == "__launch_bounds__") {
      i = text.find(')', i);
      if (i == std::string::npos) return "";
      ++i;
      continue;
    }
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    return i < text.size() && text[i] == '(' ? w : "";
  }
  return "";
}

// (name, file) for every __global__ function under the source folders.
std::set<std::pair<std::string, std::string>> kernels_in_sources() {
  std::set<std::pair<std::string, std::string>> found;
  for (const char* dir : {"runtime", "plugins", "models", "sdk"}) {
    for (const auto& e : fs::recursive_directory_iterator(fs::path(LOOM_SOURCE_DIR) / dir)) {
      const std::string ext = e.path().extension().string();
      if (!e.is_regular_file() ||
          (ext != ".cu" && ext != ".cuh" && ext != ".hpp" && ext != ".h" && ext != ".cpp"))
        continue;
      const std::string text = loom::test::read_text(e.path());
      for (size_t at = text.find("__global__"); at != std::string::npos;
           at = text.find("__global__", at + 1))
        if (const std::string name = kernel_name(text, at); !name.empty())
          found.insert({name, fs::relative(e.path(), LOOM_SOURCE_DIR).string()});
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
