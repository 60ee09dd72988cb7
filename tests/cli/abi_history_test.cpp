// The ABI promise, tested against history: ddp and the tf32 example, each built from its own
// sources against the SDK headers of an old commit (ABI 1.3: the last commit before 1.4; ABI 1.7:
// the last before 1.8), load into today's runtime and train 2 ranks bitwise as the plugins built
// today do: the same loss and gradient norm, to the last digit metrics.jsonl writes.
#include <doctest/doctest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "support/process.hpp"

using namespace loom::test;
namespace fs = std::filesystem;

namespace {

// Builds REV's ddp and tf32 against REV's headers into DIR; empty REV: today's tf32 (ddp is built in).
void build_plugins(const std::string& rev, const fs::path& dir) {
  fs::create_directories(dir / "src");
  const std::string flags = " -std=c++20 -O2 -shared -fPIC -fvisibility=hidden -I";
  if (rev.empty()) {
    auto tf32 = sh("c++" + flags + LOOM_SOURCE_DIR "/sdk/include " LOOM_SOURCE_DIR "/sdk/examples/tf32-precision/tf32.cpp -o " +
                   (dir / "libloom-precision-tf32.so").string());
    REQUIRE_MESSAGE(tf32.rc == 0, tf32.out);
    return;
  }
  auto files = sh("git -C " LOOM_SOURCE_DIR " archive '" + rev + "' sdk/include plugins/parallel/ddp sdk/examples/tf32-precision | tar -x -C " +
                  (dir / "src").string());
  REQUIRE_MESSAGE(files.rc == 0, files.out);
  const std::string inc = (dir / "src/sdk/include").string() + " ";
  for (const auto& [src, lib] : {std::pair<std::string, std::string>{"plugins/parallel/ddp/ddp.cpp", "libloom-parallel-ddp.so"},
                                 {"sdk/examples/tf32-precision/tf32.cpp", "libloom-precision-tf32.so"}}) {
    auto built = sh("c++" + flags + inc + (dir / "src" / src).string() + " -o " + (dir / lib).string());
    REQUIRE_MESSAGE(built.rc == 0, built.out);
  }
}

// Each step's "loss" and "grad_norm" as metrics.jsonl spells them, and the ABI plugins.json records.
std::vector<std::string> train(const TempDir& t, const fs::path& plugins, const std::string& name, std::string& abis) {
  const fs::path run = t.path / ("run-" + name);
  auto r = sh("LOOM_PLUGIN_PATH=" + plugins.string() + " " LOOM_BIN " train " + (t.path / "t.toml").string() + " --run-dir " +
              run.string());
  INFO(r.out);
  REQUIRE(r.rc == 0);
  std::vector<std::string> steps;
  std::ifstream in(run / "metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) steps.push_back(j["loss"].dump() + " " + j["grad_norm"].dump());
  }
  std::ifstream record(run / "plugins.json");
  const nlohmann::json used = nlohmann::json::parse(record);
  for (const auto& slot : used["plugins"]) abis += slot["name"].get<std::string>() + "=" + slot["abi"].get<std::string>() + " ";
  return steps;
}

}  // namespace

TEST_CASE("ddp and tf32 built against the ABI 1.3 and 1.7 headers from git history train 2 ranks bitwise as today's") {
  TempDir t;
  std::string text;
  for (int i = 0; i < 60; ++i) text += "the quick brown fox jumps over the lazy dog " + std::to_string(i) + "\n";
  REQUIRE(run_loom("data prepare --text " + t.write("c.txt", text) + " --out " + (t.path / "d").string()).rc == 0);
  t.write("t.toml", "[run]\nthreads = 1\n[data]\ndir = \"" + (t.path / "d").string() + "\"\n[model]\npreset = \"llama-tiny\"\n"
                    "seq_len = 32\n[train]\nsteps = 4\nglobal_batch = 4\neval_every = 0\n[parallel]\nnproc = 2\ndp = 2\n"
                    "[plugins]\nprecision = \"tf32\"\n");
  build_plugins("", t.path / "today");
  std::string today_abis;
  const std::vector<std::string> today = train(t, t.path / "today", "today", today_abis);
  REQUIRE(today.size() == 4);
  for (const auto& [rev, abi] : {std::pair<std::string, std::string>{"37750d7^", "1.3"}, {"9453c5d^", "1.7"}}) {
    build_plugins(rev, t.path / abi);
    std::string abis;
    const std::vector<std::string> old = train(t, t.path / abi, abi, abis);
    INFO("ABI " << abi << ": " << abis << " against " << today_abis);
    CHECK(abis.find("ddp=" + abi + " ") != std::string::npos);  // the old builds, not today's
    CHECK(abis.find("tf32=" + abi + " ") != std::string::npos);
    CHECK(old == today);
  }
}
