// Logs that dashboards read: TensorBoard event files ([run] tensorboard) read back by the
// tensorboard package itself with the scalars of metrics.jsonl, and the ETA of long runs.
#include <doctest/doctest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "support/process.hpp"
#include "train/metrics.hpp"

using namespace loom::test;
namespace fs = std::filesystem;
using nlohmann::json;

TEST_CASE(
    "TensorBoard reads a run's events with the same scalars at the same steps as metrics.jsonl") {
  TempDir t;
  std::string text;
  for (int i = 0; i < 40; ++i)
    text += "the quick brown fox jumps over the lazy dog " + std::to_string(i) + "\n";
  const std::string data = (t.path / "d").string();
  REQUIRE(run_loom("data prepare --val-fraction 0.2 --text " + t.write("c.txt", text) + " --out " +
                   data)
              .rc == 0);
  const std::string cfg = t.write(
      "t.toml", "[run]\nthreads = 1\ntensorboard = true\n[data]\ndir = \"" + data +
                    "\"\n[model]\npreset = \"llama-tiny\"\nseq_len = 32\n[train]\nsteps = 6\n"
                    "global_batch = 2\neval_every = 3\n");
  const fs::path run = t.path / "run";
  auto r = run_loom("train " + cfg + " --run-dir " + run.string());
  INFO(r.out);
  REQUIRE(r.rc == 0);
  auto read = sh(LOOM_SOURCE_DIR "/.venv/bin/python " LOOM_SOURCE_DIR
                                 "/tests/reference/tensorboard_read.py " +
                 (run / "tensorboard").string() + " 2>/dev/null");
  INFO(read.out);
  REQUIRE(read.rc == 0);
  const json board = json::parse(read.out);
  // Every (tag, step, value) of metrics.jsonl, as TensorBoard's float32.
  std::map<std::string, std::map<int64_t, double>> want;
  std::ifstream metrics(run / "metrics.jsonl");
  std::string line;
  while (std::getline(metrics, line)) {
    const json j = json::parse(line);
    for (const auto& [tag, v] : j.items())
      if (tag != "step") want[tag][j["step"].get<int64_t>()] = v.get<double>();
  }
  REQUIRE(want.count("loss"));
  REQUIRE(want.count("val_loss"));
  CHECK(board.size() == want.size());
  for (const auto& [tag, points] : want) {
    INFO(tag);
    REQUIRE(board.contains(tag));
    REQUIRE(board[tag].size() == points.size());
    for (const json& p : board[tag]) {
      const int64_t step = p[0].get<int64_t>();
      REQUIRE(points.count(step));
      CHECK(p[1].get<double>() == doctest::Approx(points.at(step)).epsilon(1e-6));
    }
  }
}

TEST_CASE(
    "the ETA shows on step lines of runs of a minute or more, from the mean step time so far") {
  using loom::train::eta_suffix;
  CHECK(eta_suffix(10, 10, 20) == "");              // 30 s in all: short runs show none
  CHECK(eta_suffix(30, 10, 20) == " | eta 1m00s");  // 3 s a step, 20 left
  CHECK(eta_suffix(125, 1, 100) == " | eta 3h28m");
  CHECK(eta_suffix(100, 10, 0) == "");  // the last step
  CHECK(eta_suffix(100, 0, 10) == "");  // nothing measured yet
}
