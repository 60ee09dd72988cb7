// Llama-shaped models (RoPE, grouped-query attention, RMSNorm, SwiGLU, no biases, untied head)
// under every strategy: each layout matches the single-rank fp32 run, checkpoints resume to the
// bit and reshard, and architectures that cannot work are config errors naming the key.
#include <doctest/doctest.h>

#include "support/layouts.hpp"

using namespace loom::test;
namespace fs = std::filesystem;

namespace {

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// llama-tiny: 4 blocks, d_model 64, 4 query heads sharing 2 key/value heads, d_ff 192 (Llama's
// rounding to a multiple of 32), RoPE, RMSNorm, SwiGLU, no biases, untied head.
const char* kModel = "preset = \"llama-tiny\"\nseq_len = 16";
// lr 1e-3: at 3e-3 step 4 spikes (grad norm 6.5) and amplifies fp32 rounding differences between
// layouts past 1e-5 on some CPUs (OpenBLAS picks its kernels by CPU).
const char* kTrain = "steps = 10\nglobal_batch = 4\nlr = 1e-3\nwarmup_steps = 2";

}  // namespace

TEST_CASE(
    "llama-tiny under tp, tp+sp, dp x tp, pp (1f1b, interleaved), zero3 and zero1 x tp matches one "
    "rank") {
  LayoutRuns runs(kModel, kTrain);
  Curves one = runs.run("--set parallel.nproc=1");
  REQUIRE(one.loss.size() == 10);
  CHECK(one.loss.back() < one.loss.front());
  CHECK(has(one.out, "2 kv heads"));
  const char* layouts[] = {
      "--set parallel.nproc=2 --set parallel.tp=2",
      "--set parallel.nproc=2 --set parallel.tp=2 --set plugins.sequence=sp",
      "--set parallel.nproc=4 --set parallel.tp=2",
      "--set parallel.nproc=2 --set parallel.pp=2 --set train.micro_batch=1 --set "
      "plugins.pipeline=1f1b",
      "--set parallel.nproc=2 --set parallel.pp=2 --set train.micro_batch=1 --set "
      "plugins.pipeline=interleaved",
      "--set parallel.nproc=2 --set plugins.data=zero3",
      "--set parallel.nproc=4 --set parallel.tp=2 --set plugins.data=zero1",
  };
  for (const char* layout : layouts) check_same(one, runs.run(layout), 1e-5, layout);
}

TEST_CASE(
    "a Mixtral-shaped llama-tiny (SwiGLU experts, no biases) under ep = 2 and ep = 2 x dp = 2 "
    "matches one rank") {
  LayoutRuns runs(
      std::string(kModel) + "\n[model.moe]\nexperts = 4\ntop_k = 2\nevery = 2\ndropless = true",
      kTrain);
  Curves one = runs.run("--set parallel.nproc=1");
  REQUIRE(one.loss.size() == 10);
  for (const char* layout :
       {"--set parallel.nproc=2 --set parallel.ep=2", "--set parallel.nproc=4 --set parallel.ep=2"})
    check_same(one, runs.run(layout), 1e-5, layout);
}

TEST_CASE(
    "grouped-query attention with biases, LayerNorm and a learned table longer than seq_len, under "
    "tp+sp") {
  // Qwen-style biases on q and kv; max_positions = 32 rows while training at T = 16.
  LayoutRuns runs(
      "n_layer = 2\nn_head = 4\nn_kv_head = 2\nd_model = 32\nd_ff = 64\nseq_len = 16\n"
      "positions = \"learned\"\nmax_positions = 32\nbias = true\nnorm_eps = 1e-6",
      "steps = 5\nglobal_batch = 2\nlr = 3e-3\nwarmup_steps = 1");
  Curves one = runs.run("--set parallel.nproc=1");
  check_same(one, runs.run("--set parallel.nproc=2 --set parallel.tp=2 --set plugins.sequence=sp"),
             1e-5, "tp=2+sp, gqa with biases");
}

TEST_CASE(
    "llama-tiny resumes to the bit, and a dp=2 x tp=2 checkpoint continues under tp=4 and on one "
    "rank") {
  // 8 query heads over 4 key/value heads, so tp = 4 holds one key/value head per rank.
  LayoutRuns runs(std::string(kModel) + "\nn_head = 8\nn_kv_head = 4",
                  "steps = 12\nglobal_batch = 4\nlr = 3e-3\nwarmup_steps = 2");
  Curves full = runs.run("--set plugins.ckpt=sync");
  TempDir t;
  const std::string dir = (t.path / "run").string(),
                    common = "--set plugins.ckpt=sync --set checkpoint.every=6 --run-dir " + dir;
  REQUIRE(run_loom("train " + runs.config() + " " + common + " --set train.exit_after=6").rc == 0);
  auto second =
      run_loom("train " + runs.config() + " " + common + " --set checkpoint.resume=latest");
  REQUIRE(second.rc == 0);
  check_bitwise(full, {column(fs::path(dir) / "metrics.jsonl", "loss"),
                       column(fs::path(dir) / "metrics.jsonl", "grad_norm"),
                       {},
                       {}});
  check_reshard(runs, "--set parallel.nproc=4 --set parallel.tp=2", 6,
                {"--set parallel.nproc=4 --set parallel.tp=4", "--set parallel.nproc=1"}, 1e-5);
}

TEST_CASE("llama-tiny trains under every precision plugin, close to fp32") {
  LayoutRuns runs(kModel, kTrain);
  Curves fp32 = runs.run("");
  for (const char* p : {"bf16", "fp16", "fp8"}) {
    Curves c = runs.run(std::string("--set plugins.precision=") + p);
    INFO(p << ": final loss " << c.loss.back() << " vs fp32 " << fp32.loss.back());
    REQUIRE(c.loss.size() == fp32.loss.size());
    CHECK(c.loss.back() < c.loss.front());
    CHECK(std::fabs(c.loss.back() - fp32.loss.back()) < 0.05 * fp32.loss.back());
  }
}

TEST_CASE("Llama architectures that cannot work are config errors naming the key") {
  LayoutRuns runs(kModel, "steps = 1\nglobal_batch = 2");
  struct Case {
    const char* sets;
    const char* message;
  } cases[] = {
      {"--set model.n_kv_head=3", "n_kv_head = 3 does not divide n_head = 4"},
      {"--set model.rope_theta=0", "rope_theta = 0 must be positive"},
      {"--set model.rope_theta=-5", "rope_theta = -5 must be positive"},
      {"--set model.positions=learned --set model.max_positions=8",
       "seq_len = 16 is more than max_positions = 8"},
      {"--set model.d_model=60 --set model.n_head=4 --set model.n_kv_head=2",
       "d_model / n_head = 15 is odd"},
      {"--set model.n_kv_head=2 --set parallel.nproc=4 --set parallel.tp=4",
       "n_kv_head = 2 is not divisible by [parallel] tp = 4"},
      {"--set model.rope_scaling.type=llama3 --set model.rope_scaling.high_freq_factor=0.5",
       "high_freq_factor = 0.5 must be more than low_freq_factor = 1"},
      {"--set model.positons=rope", "did you mean 'positions'"},
  };
  for (const auto& c : cases) {
    auto r = runs.raw(c.sets);
    INFO(c.sets << "\n" << r.out);
    CHECK(r.rc == 2);
    CHECK(has(r.out, c.message));
  }
}
