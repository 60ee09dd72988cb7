// Context parallelism: every cp layout trains the single-rank model (ring and all-gather, zig-zag
// and contiguous, with RoPE and with learned positions, composed with dp, tp, sp, pp and ZeRO);
// the memory a rank holds falls with cp; bad layouts are config errors.
#include <doctest/doctest.h>

#include "support/layouts.hpp"

using namespace loom::test;

namespace {

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

const char* kLlama = "preset = \"llama-tiny\"\nseq_len = 16";
// lr 1e-3: at 3e-3 step 4 spikes (grad norm 6.5) and amplifies fp32 rounding differences between
// layouts past 1e-5 on some CPUs (OpenBLAS picks its kernels by CPU).
const char* kTrain = "steps = 10\nglobal_batch = 4\nlr = 1e-3\nwarmup_steps = 2";

}  // namespace

TEST_CASE(
    "llama-tiny (RoPE) under cp = 2 and 4, dp2 x cp2, tp2 x cp2, tp2+sp x cp2, pp2 x cp2 and zero1 "
    "matches one rank") {
  LayoutRuns runs(kLlama, kTrain);
  Curves one = runs.run("--set parallel.nproc=1");
  REQUIRE(one.loss.size() == 10);
  const char* layouts[] = {
      "--set parallel.nproc=2 --set parallel.cp=2",
      "--set parallel.nproc=4 --set parallel.cp=4",
      "--set parallel.nproc=4 --set parallel.cp=2",
      "--set parallel.nproc=4 --set parallel.cp=2 --set parallel.tp=2",
      "--set parallel.nproc=4 --set parallel.cp=2 --set parallel.tp=2 --set plugins.sequence=sp",
      "--set parallel.nproc=4 --set parallel.cp=2 --set parallel.pp=2 --set train.micro_batch=1",
      "--set parallel.nproc=4 --set parallel.cp=2 --set plugins.data=zero1",
  };
  for (const char* layout : layouts) {
    Curves c = runs.run(layout);
    check_same(one, c, 1e-5, layout);
    CHECK(has(c.out, " cp="));
  }
}

TEST_CASE(
    "the all-gather algorithm, the contiguous split and ring without overlap give the same model") {
  LayoutRuns runs(kLlama, kTrain);
  Curves one = runs.run("--set parallel.nproc=1");
  for (const char* layout :
       {"--set parallel.nproc=2 --set parallel.cp=2 --set plugins.cp.algorithm=allgather",
        "--set parallel.nproc=4 --set parallel.cp=4 --set plugins.cp.split=contiguous",
        "--set parallel.nproc=2 --set parallel.cp=2 --set plugins.cp.overlap=false"})
    check_same(one, runs.run(layout), 1e-5, layout);
}

TEST_CASE(
    "GPT-2 shaped (learned positions, LayerNorm, biases) under cp = 2 and cp = 4 matches one "
    "rank") {
  LayoutRuns runs("preset = \"gpt2-tiny\"\nseq_len = 16", kTrain);
  Curves one = runs.run("--set parallel.nproc=1");
  for (const char* layout :
       {"--set parallel.nproc=2 --set parallel.cp=2", "--set parallel.nproc=4 --set parallel.cp=4",
        "--set parallel.nproc=4 --set parallel.cp=2 --set parallel.tp=2 --set plugins.sequence=sp"})
    check_same(one, runs.run(layout), 1e-5, layout);
}

TEST_CASE(
    "the zig-zag split balances attention over the cp ranks and the ring reports its transfers") {
  LayoutRuns runs("preset = \"llama-tiny\"\nseq_len = 512", "steps = 3\nglobal_batch = 2");
  Curves c = runs.run("--set parallel.nproc=2 --set parallel.cp=2");
  const auto bytes = column(c.metrics, "cp_comm_bytes");
  REQUIRE(bytes.size() == 3);
  // A block is 2 sequences x 256 positions x (K, V) x 2 kv heads x 16 floats. Per layer, forward
  // sends one block; backward one block and a gradient sum at each of the 2 steps: 4 blocks.
  CHECK(bytes.back() == doctest::Approx(4.0 * 4 * (2 * 256 * 2 * 2 * 16) * 4));
  CHECK(column(c.metrics, "cp_attention_ms").back() > 0);
}

TEST_CASE(
    "cp cuts a rank's memory: a long-context llama-tiny over the cap on one rank fits under it at "
    "cp = 4") {
  // T = 4096, 4 sequences, a wide MLP: activations dominate the tensors a rank holds.
  LayoutRuns runs("preset = \"llama-tiny\"\nseq_len = 4096\nd_ff = 4096",
                  "steps = 1\nglobal_batch = 4");
  const double cap = 3.0 * (1 << 30);
  Curves one = runs.run("--set run.threads=0 --set parallel.nproc=1");
  Curves four = runs.run("--set run.threads=0 --set parallel.nproc=4 --set parallel.cp=4");
  const double tensors1 = column(one.metrics, "device_peak_bytes").back();
  const double tensors4 = column(four.metrics, "device_peak_bytes").back();
  const double rss1 = column(one.metrics, "peak_mem_bytes").back(),
               rss4 = column(four.metrics, "peak_mem_bytes").back();
  INFO("tensor peak " << tensors1 / (1 << 20) << " -> " << tensors4 / (1 << 20) << " MiB, RSS peak "
                      << rss1 / (1 << 20) << " -> " << rss4 / (1 << 20) << " MiB");
  CHECK(tensors1 > cap);
  CHECK(tensors4 < cap);
  CHECK(tensors1 / tensors4 >= 3.5);
  // The process's code and libraries (~170 MiB per rank here) do not shrink with cp.
  CHECK(rss1 / rss4 >= 3.0);
  CHECK(column(one.metrics, "activation_bytes").back() /
            column(four.metrics, "activation_bytes").back() ==
        doctest::Approx(4.0).epsilon(0.01));
}

TEST_CASE("bad context-parallel layouts are config errors naming the key") {
  LayoutRuns runs("preset = \"llama-tiny\"\nseq_len = 12", "steps = 1\nglobal_batch = 2");
  auto odd = runs.raw("--set parallel.nproc=4 --set parallel.cp=4");
  CHECK(odd.rc == 2);
  CHECK(has(odd.out, "seq_len = 12 is not a multiple of 2 x cp = 8"));
  auto contiguous =
      runs.raw("--set parallel.nproc=4 --set parallel.cp=4 --set plugins.cp.split=contiguous");
  CHECK(contiguous.rc == 0);  // 12 = 4 x 3 splits contiguously
  auto algo =
      runs.raw("--set parallel.nproc=2 --set parallel.cp=2 --set plugins.cp.algorithm=rings");
  CHECK(algo.rc == 2);
  CHECK(has(algo.out, "algorithm = \"rings\""));
  auto world = runs.raw("--set parallel.nproc=3 --set parallel.cp=2");
  CHECK(world.rc == 2);
  CHECK(has(world.out, "tp x pp x ep x cp = 2 does not divide the world size 3"));
  // A MoE model under cp used to be refused here; it trains now
  // (tests/distributed/compositions_test.cpp).
  auto moe = runs.raw("--set parallel.nproc=2 --set parallel.cp=2 --set model.moe.experts=4");
  CHECK(moe.rc == 0);
  auto p2p =
      runs.raw("--set parallel.nproc=2 --set parallel.cp=2 --set plugins.comm=" LOOM_TEST_PLUGIN_DIR
               "/libloom-precision-nop2p.so");
  CHECK(p2p.rc == 2);
  CHECK(has(p2p.out,
            "cp = 2 needs a comm backend with send and recv, which [plugins] comm = \"nop2p\" does "
            "not offer"));
  auto layers = runs.raw("--set model.recompute=full --set model.recompute_layers=9");
  CHECK(layers.rc == 2);
  CHECK(has(layers.out, "recompute_layers = 9 is more than n_layer = 4"));
}

TEST_CASE("text samples under cp = 2, cp2 x tp2, cp2 x tp2+sp and cp2 x pp2 read as on one rank") {
  LayoutRuns runs("preset = \"gpt2-tiny\"\nseq_len = 16", kTrain);
  const std::string one =
      sample_text(runs.run(std::string("--set parallel.nproc=1") + kGreedySample).out, 10);
  CHECK(one.size() > 40);
  for (const char* layout :
       {"--set parallel.nproc=2 --set parallel.cp=2",
        "--set parallel.nproc=4 --set parallel.cp=2 --set parallel.tp=2",
        "--set parallel.nproc=4 --set parallel.cp=2 --set parallel.tp=2 --set plugins.sequence=sp",
        "--set parallel.nproc=4 --set parallel.cp=2 --set parallel.pp=2 --set "
        "train.micro_batch=1"}) {
    INFO(layout);
    CHECK(sample_text(runs.run(std::string(layout) + kGreedySample).out, 10) == one);
  }
}
