// `loom plan --emit`: the config of a ranked layout, written so that `loom config check` accepts it
// and `loom train` runs it. The top 5 layouts of the demo's shape and of llama-tiny, planned for
// this machine's two cores, each train for two steps.
#include <doctest/doctest.h>

#include <filesystem>

#include "support/metrics.hpp"
#include "support/process.hpp"

using namespace loom::test;

namespace {

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

const std::string kCluster = std::string(LOOM_SOURCE_DIR) + "/clusters/this-machine.toml";

// A small corpus, and a config of `model` over it (the data directory absolute, as an emitted
// config keeps it).
std::string job(TempDir& t, const std::string& model) {
  std::string text;
  for (int i = 0; i < 400; ++i)
    text += "a layout the planner ranks must also train " + std::to_string(i % 11) + "\n";
  t.write("c.txt", text);
  const auto prep = run_loom("data prepare --text " + (t.path / "c.txt").string() + " --out " +
                             (t.path / "d").string());
  REQUIRE(prep.rc == 0);
  return t.write(
      "job.toml",
      "[run]\nthreads = 1\n[model]\n" + model + "\n[data]\ndir = \"" + (t.path / "d").string() +
          "\"\n[train]\nsteps = 2\nglobal_batch = 16\neval_every = 0\nsample_every = 0\n");
}

}  // namespace

TEST_CASE(
    "loom plan --emit writes the top 5 layouts of the demo and of llama-tiny, and each checks and "
    "trains") {
  const std::vector<std::pair<std::string, std::string>> models = {
      {"demo", "n_layer = 4\nn_head = 4\nd_model = 128\nseq_len = 128\nvocab_size = 256"},
      {"llama-tiny", "preset = \"llama-tiny\"\nd_model = 128\nseq_len = 128"}};
  for (const auto& [name, model] : models) {
    TempDir t;
    const std::string cfg = job(t, model);
    for (int rank = 1; rank <= 5; ++rank) {
      const std::string out = (t.path / ("top" + std::to_string(rank) + ".toml")).string();
      const auto emit = run_loom("plan " + cfg + " --cluster " + kCluster + " --devices 2 --emit " +
                                 std::to_string(rank) + " --out " + out);
      INFO(name << " #" << rank << "\n" << emit.out);
      REQUIRE(emit.rc == 0);
      CHECK(has(emit.out, "wrote " + out));
      CHECK(has(read_text(out), "# Written by `loom plan "));
      const auto check = run_loom("config check " + out);
      INFO(check.out);
      CHECK(check.rc == 0);
      const std::string dir = (t.path / ("run" + std::to_string(rank))).string();
      const auto train = run_loom("train " + out + " --run-dir " + dir);
      INFO(train.out);
      REQUIRE(train.rc == 0);
      CHECK(column(std::filesystem::path(dir) / "metrics.jsonl", "loss").size() == 2);
    }
  }
}

TEST_CASE(
    "loom plan --emit refuses a rank past the table, a layout the plugins cannot run, a policy "
    "Loom does not run, and no --out") {
  TempDir t;
  const std::string cfg = t.write(
      "m.toml",
      "[model]\nn_layer = 2\nn_head = 2\nd_model = 64\nseq_len = 32\n[train]\nglobal_batch = 8\n");
  const std::string plan = "plan " + cfg + " --cluster " + kCluster + " --devices 2 ";
  const auto past = run_loom(plan + "--emit 100000 --out " + (t.path / "x.toml").string());
  CHECK(past.rc == 2);
  CHECK(has(past.out, "--emit 100000: the table ranks"));
  const auto refused =
      run_loom(plan + "--emit \"dp1 tp2 mb8\" --set model.n_head=3 --set model.d_model=66 --out " +
               (t.path / "x.toml").string());
  CHECK(refused.rc == 2);
  CHECK(has(refused.out, "[model] n_head = 3 is not divisible by [parallel] tp = 2"));
  const auto policy =
      run_loom(plan + "--emit \"dp2 mb4 selective-op\" --out " + (t.path / "x.toml").string());
  CHECK(policy.rc == 2);
  CHECK(has(policy.out,
            "recompute 'selective-op' is a published run's policy that Loom does not run"));
  const auto no_out = run_loom(plan + "--emit 1");
  CHECK(no_out.rc == 2);
  CHECK(has(no_out.out, "--emit needs --out FILE"));
  CHECK_FALSE(std::filesystem::exists(t.path / "x.toml"));
}
