// The CUDA backend and the NCCL plugin block the host only where the device contract says so: a
// scan of their sources for the calls that block the host (or allocate outside the caching
// allocator) against a short allowlist, one reason per entry. The tree holds no managed memory,
// and the CUDA table declares its memory out of the host's reach. The scan reads code, so it
// runs in every build, with or without the toolkit.
#include <doctest/doctest.h>

#include <filesystem>
#include <map>
#include <set>
#include <string>

#include "support/process.hpp"

namespace fs = std::filesystem;

namespace {

// The text without its // and /* */ comments (a comment may name a call it does not make).
std::string code_of(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text.compare(i, 2, "//") == 0) {
      while (i < text.size() && text[i] != '\n') ++i;
    } else if (text.compare(i, 2, "/*") == 0) {
      const size_t end = text.find("*/", i + 2);
      i = end == std::string::npos ? text.size() : end + 1;
      continue;
    }
    if (i < text.size()) out += text[i];
  }
  return out;
}

bool ident(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// How many times `code` calls `name` (the name alone, then an opening parenthesis).
int calls(const std::string& code, const std::string& name) {
  int n = 0;
  for (size_t at = code.find(name); at != std::string::npos; at = code.find(name, at + 1)) {
    if (at > 0 && ident(code[at - 1])) continue;
    size_t after = at + name.size();
    while (after < code.size() && code[after] == ' ') ++after;
    if (after < code.size() && code[after] == '(') ++n;
  }
  return n;
}

const char* const kBlocking[] = {"cudaStreamSynchronize",
                                 "cudaDeviceSynchronize",
                                 "cudaEventSynchronize",
                                 "cudaMemcpy",
                                 "cudaMalloc",
                                 "cudaFree"};

struct Allowed {
  const char* file;
  const char* call;
  const char* reason;
};
const Allowed kAllowed[] = {
    {"runtime/ops/cuda/table.cpp", "cudaEventSynchronize",
     "sync_event: the contract's host wait on an event"},
    {"runtime/ops/cuda/table.cpp", "cudaDeviceSynchronize",
     "synchronize: the contract's wait for every stream"},
    {"runtime/ops/cuda/memory.cpp", "cudaMalloc", "the caching allocator's blocks"},
    {"runtime/ops/cuda/memory.cpp", "cudaFree",
     "the allocator hands its cached blocks back when the GPU is full"},
    {"runtime/ops/cuda/memory.cpp", "cudaDeviceSynchronize",
     "before those blocks go back: only when the GPU is full"},
    {"runtime/ops/cuda/memory.cpp", "cudaStreamSynchronize",
     "wait_current_stream: a host output the contract names (per-row losses, a norm, quantize's "
     "amax)"},
};

}  // namespace

TEST_CASE(
    "the CUDA backend and NCCL plugin block the host only at the contract's waits, each allowed "
    "with a reason") {
  std::set<std::pair<std::string, std::string>> found;
  for (const char* dir : {"runtime/ops/cuda", "plugins/comm/nccl"})
    for (const auto& e : fs::recursive_directory_iterator(fs::path(LOOM_SOURCE_DIR) / dir)) {
      const std::string ext = e.path().extension().string();
      if (ext != ".cpp" && ext != ".cu" && ext != ".cuh" && ext != ".hpp") continue;
      const std::string file = fs::relative(e.path(), LOOM_SOURCE_DIR).string();
      if (file.find("/host/") != std::string::npos) continue;  // the CPU harness, no CUDA calls
      const std::string code = code_of(loom::test::read_text(e.path()));
      for (const char* call : kBlocking)
        if (calls(code, call) > 0) found.insert({file, call});
    }
  std::set<std::pair<std::string, std::string>> allowed;
  for (const Allowed& a : kAllowed) allowed.insert({a.file, a.call});
  for (const auto& [file, call] : found) {
    INFO(file << " calls " << call
              << ", which blocks the host or allocates outside the caching allocator");
    CHECK(allowed.count({file, call}) == 1);
  }
  for (const auto& [file, call] : allowed) {
    INFO("the allowlist names " << call << " in " << file
                                << ", which no longer calls it: remove the entry");
    CHECK(found.count({file, call}) == 1);
  }
}

TEST_CASE(
    "no managed memory anywhere in the tree, and the CUDA table declares host_reachable = 0") {
  const std::string managed = std::string("cudaMalloc") + "Managed";
  for (const char* dir : {"runtime", "plugins", "sdk", "models", "tests", "bench", "tools"})
    for (const auto& e : fs::recursive_directory_iterator(fs::path(LOOM_SOURCE_DIR) / dir)) {
      if (!e.is_regular_file()) continue;
      const std::string ext = e.path().extension().string();
      if (ext != ".cpp" && ext != ".cu" && ext != ".cuh" && ext != ".hpp" && ext != ".h" &&
          ext != ".c")
        continue;
      INFO(e.path().string());
      CHECK(code_of(loom::test::read_text(e.path())).find(managed) == std::string::npos);
    }
  // The table takes the contract's entries, host_reachable = 0 among them, from one macro.
  const std::string table =
      code_of(loom::test::read_text(fs::path(LOOM_SOURCE_DIR) / "runtime/ops/cuda/table.cpp"));
  const std::string entries =
      code_of(loom::test::read_text(fs::path(LOOM_SOURCE_DIR) / "runtime/ops/kernel_entries.hpp"));
  CHECK(table.find("LOOM_OPS_CONTRACT_ENTRIES(t, loom::cuda);") != std::string::npos);
  CHECK(table.find("host_reachable") == std::string::npos);
  const size_t contract = entries.find("#define LOOM_OPS_CONTRACT_ENTRIES");
  REQUIRE(contract != std::string::npos);
  CHECK(entries.find("(t).host_reachable = 0;", contract) != std::string::npos);
}
