// Activation recomputation: none, selective and full train the same model to the bit under every
// layout (the replay runs the same kernels on the same inputs), each keeps what its policy says,
// and the measured peak memory falls by what the model says it no longer keeps.
#include <doctest/doctest.h>

#include "support/layouts.hpp"

using namespace loom::test;

namespace {

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

const char* kModel = "preset = \"llama-tiny\"\nseq_len = 16";
const char* kTrain = "steps = 10\nglobal_batch = 4\nlr = 3e-3\nwarmup_steps = 2";

}  // namespace

TEST_CASE(
    "recompute none, selective and full give the same losses and grad norms, bit for bit, in every "
    "layout") {
  LayoutRuns runs(kModel, kTrain);
  const char* layouts[] = {
      "--set parallel.nproc=1",
      "--set parallel.nproc=4 --set parallel.tp=2",
      "--set parallel.nproc=2 --set parallel.tp=2 --set plugins.sequence=sp",
      "--set parallel.nproc=2 --set parallel.pp=2 --set train.micro_batch=1 --set "
      "plugins.pipeline=interleaved",
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

TEST_CASE(
    "recompute with MoE blocks and expert parallelism: dense blocks recompute, the losses stay "
    "bitwise") {
  LayoutRuns runs(
      std::string(kModel) + "\n[model.moe]\nexperts = 4\ntop_k = 2\nevery = 2\ndropless = true",
      kTrain);
  Curves none = runs.run("--set parallel.nproc=2 --set parallel.ep=2");
  check_bitwise(none,
                runs.run("--set parallel.nproc=2 --set parallel.ep=2 --set model.recompute=full"));
}

TEST_CASE("what each policy keeps: activation bytes and the measured peak fall together") {
  // Activations dominate by construction: T = 512, 8 blocks, a micro-batch of 8 sequences.
  LayoutRuns runs("preset = \"llama-tiny\"\nseq_len = 512\nn_layer = 8",
                  "steps = 2\nglobal_batch = 8");
  double bytes[3], peak[3];
  const char* policies[] = {"none", "selective", "full"};
  for (int i = 0; i < 3; ++i) {
    Curves c = runs.run(std::string("--set model.recompute=") + policies[i]);
    bytes[i] = column(c.metrics, "activation_bytes").back();
    peak[i] = column(c.metrics, "peak_mem_bytes").back();
  }
  INFO("activation bytes " << bytes[0] << " " << bytes[1] << " " << bytes[2] << ", peak " << peak[0]
                           << " " << peak[1] << " " << peak[2]);
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

namespace {

// Korthikanti et al. 2022, Table 2, adapted to Loom (docs/memory.md): 4-byte elements where they
// count 2, no dropout masks, and the tiled attention kernel, which keeps a log-sum-exp per head (a
// floats per token) instead of the a·s softmax and its dropout (their 5as/h). Per token of one
// GPT-2 block, in floats: replicated rows x_in, x_mid, ln1, ln2 (4h) and the LayerNorm statistics
// (4), divided by t under sequence parallelism (r = t); tp-sharded q, k, v (3h), attention output
// (h), lse (a), fc and gelu (4h each), divided by t. That is their sbh(10 + 24/t) with 4-byte
// elements and no masks. Selective drops ln1, ln2 and gelu; full keeps x_in. A recomputing run adds
// one block's dropped set at full width (the shared replay buffer, N = s·b rows) and, for full, a
// residual stream to replay on. The head keeps its input and norm output (2h rows, 2 statistics),
// the gathered rows under sp (h) and the logits (V/t).
double korthikanti_bytes(const std::string& policy, double s, double b, double h, double a,
                         double V, double L, double t, bool sp) {
  const double N = s * b, r = sp ? t : 1;
  double layer = (4 * h + 4) / r + (12 * h + a) / t, replay = 0;
  if (policy == "selective") layer -= 2 * h / r + 4 * h / t, replay = 2 * h + 4 * h;
  if (policy == "full") layer = h / r, replay = (3 * h + 4) + (12 * h + a) + h;
  const double head = (2 * h + 2) / r + (sp ? h : 0) + V / t;
  return 4 * N * (L * layer + replay + head);
}

}  // namespace

TEST_CASE(
    "activation bytes follow Korthikanti et al.'s Table 2, adapted to the tiled kernel, at tp = 1, "
    "2, 4 with and without sp") {
  // GPT-2 shaped: 4 blocks, h = 64, 4 heads, T = 64, micro-batch 2, 256-token vocabulary.
  LayoutRuns runs("preset = \"gpt2-tiny\"\nn_layer = 4\nn_head = 4", "steps = 1\nglobal_batch = 2");
  struct Layout {
    int tp;
    bool sp;
  };
  for (Layout l :
       {Layout{1, false}, Layout{2, false}, Layout{2, true}, Layout{4, false}, Layout{4, true}}) {
    for (const char* policy : {"none", "selective", "full"}) {
      std::string sets = "--set parallel.nproc=" + std::to_string(l.tp) +
                         " --set parallel.tp=" + std::to_string(l.tp) +
                         " --set model.recompute=" + policy +
                         (l.sp ? " --set plugins.sequence=sp" : "");
      Curves c = runs.run(sets);
      const double got = column(c.metrics, "activation_bytes").back();
      const double want = korthikanti_bytes(policy, 64, 2, 64, 4, 256, 4, l.tp, l.sp);
      INFO(sets << ": activation_bytes " << got << ", formula " << want);
      CHECK(got == doctest::Approx(want).epsilon(0.05));
    }
  }
}
