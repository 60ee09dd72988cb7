// Activation recomputation: none, selective and full train the same model to the bit under every
// layout (the replay runs the same kernels on the same inputs), each keeps what its policy says,
// and the measured peak memory falls by what the model says it no longer keeps.
#include <doctest/doctest.h>

#include "support/layouts.hpp"

using namespace loom::test;

namespace {

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

const char* kModel = "preset = \"llama-tiny\"\nseq_len = 16";
const char* kTrain = "steps = 10\nglobal_batch = 4\nlr = 3e-3\nwarmup_steps = 2";

}  // namespace

TEST_CASE("recompute none, selective and full give the same losses and grad norms, bit for bit, in every layout") {
  LayoutRuns runs(kModel, kTrain);
  const char* layouts[] = {
      "--set parallel.nproc=1",
      "--set parallel.nproc=4 --set parallel.tp=2",
      "--set parallel.nproc=2 --set parallel.tp=2 --set plugins.sequence=sp",
      "--set parallel.nproc=2 --set parallel.pp=2 --set train.micro_batch=1 --set plugins.pipeline=interleaved",
      "--set parallel.nproc=2 --set plugins.data=zero3",
      "--set parallel.nproc=1 --set plugins.precision=bf16",
  };
  for (const char* layout : layouts) {
    Curves none = runs.run(std::string(layout) + " --set model.recompute=none");
    REQUIRE(none.loss.size() == 10);
    for (const char* policy : {"selective", "full"}) {
      INFO(layout << ", recompute = " << policy);
      check_bitwise(none, runs.run(std::string(layout) + " --set model.recompute=" + policy));
    }
  }
}

TEST_CASE("recompute with MoE blocks and expert parallelism: dense blocks recompute, the losses stay bitwise") {
  LayoutRuns runs(std::string(kModel) + "\n[model.moe]\nexperts = 4\ntop_k = 2\nevery = 2\ndropless = true", kTrain);
  Curves none = runs.run("--set parallel.nproc=2 --set parallel.ep=2");
  check_bitwise(none, runs.run("--set parallel.nproc=2 --set parallel.ep=2 --set model.recompute=full"));
}

TEST_CASE("what each policy keeps: activation bytes and the measured peak fall together") {
  // Activations dominate by construction: T = 512, 8 blocks, a micro-batch of 8 sequences.
  LayoutRuns runs("preset = \"llama-tiny\"\nseq_len = 512\nn_layer = 8", "steps = 2\nglobal_batch = 8");
  double bytes[3], peak[3];
  const char* policies[] = {"none", "selective", "full"};
  for (int i = 0; i < 3; ++i) {
    Curves c = runs.run(std::string("--set model.recompute=") + policies[i]);
    bytes[i] = column(c.metrics, "activation_bytes").back();
    peak[i] = column(c.metrics, "peak_mem_bytes").back();
  }
  INFO("activation bytes " << bytes[0] << " " << bytes[1] << " " << bytes[2] << ", peak " << peak[0] << " " << peak[1]
                           << " " << peak[2]);
  CHECK(bytes[1] < bytes[0]);
  CHECK(bytes[2] < 0.4 * bytes[0]);
  // The peak falls by what the model says it no longer keeps, within 15%.
  CHECK((peak[0] - peak[2]) == doctest::Approx(bytes[0] - bytes[2]).epsilon(0.15));
  CHECK((peak[0] - peak[1]) == doctest::Approx(bytes[0] - bytes[1]).epsilon(0.15));
  // recompute_layers = 4: half of the blocks recompute, so the saving is about half.
  Curves half = runs.run("--set model.recompute=full --set model.recompute_layers=4");
  const double b = column(half.metrics, "activation_bytes").back();
  CHECK(b < bytes[0]);
  CHECK(b > bytes[2]);
}

TEST_CASE("recompute settings that cannot work are config errors") {
  LayoutRuns runs(kModel, "steps = 1\nglobal_batch = 2");
  auto beyond = runs.raw("--set model.recompute=full --set model.recompute_layers=9");
  CHECK(beyond.rc == 2);
  CHECK(has(beyond.out, "recompute_layers = 9 is more than n_layer = 4"));
  auto typo = runs.raw("--set model.recompute=partial");
  CHECK(typo.rc == 2);
  CHECK(has(typo.out, "\"none\", \"selective\", \"full\""));
}
