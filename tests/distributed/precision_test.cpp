// The precision plugins in training: bf16 and fp8 layouts against their own single-rank runs,
// the fp16 loss scale recovering from a tiny start, and an injected inf on one rank skipping the
// step on every rank without touching the weights.
#include <doctest/doctest.h>

#include "support/layouts.hpp"

using namespace loom::test;

namespace {
const char* kModel =
    "n_layer = 2\nn_head = 4\nd_model = 32\nd_ff = 64\nvocab_size = 130\nseq_len = 16";
const char* kTrain = "steps = 10\nglobal_batch = 4\nlr = 3e-3\nwarmup_steps = 2";
bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}
}  // namespace

TEST_CASE("bf16 under dp=2 x tp=2 (and fp8 under tp=2) matches the same precision on one rank") {
  // Rounding is elementwise, so a layout changes only the fp32 summation order of the sharded
  // GEMMs; an operand that lands near a rounding boundary can then round the other way. Measured:
  // 2e-6 (loss) and 7e-5 (grad norm) at most, against 7e-4 (bf16) and 1.5e-2 (fp8) from fp32.
  LayoutRuns runs(kModel, kTrain);
  Curves one = runs.run("--set plugins.precision=bf16");
  Curves fp32 = runs.run("--set plugins.precision=fp32");
  CHECK(one.loss.back() < one.loss.front());
  // bf16 really rounds: it does not reproduce fp32 to the bit.
  bool differs = false;
  for (size_t s = 0; s < one.loss.size(); ++s) differs |= one.grad_norm[s] != fp32.grad_norm[s];
  CHECK(differs);
  check_same(one,
             runs.run("--set plugins.precision=bf16 --set parallel.nproc=4 --set parallel.tp=2"),
             2e-4, "bf16 dp=2 x tp=2");
  // fp8's scales come from amaxes reduced over tp: every rank scales a sharded weight as the
  // single rank scales the whole one.
  Curves fp8 = runs.run("--set plugins.precision=fp8");
  check_same(fp8,
             runs.run("--set plugins.precision=fp8 --set parallel.nproc=2 --set parallel.tp=2"),
             2e-4, "fp8 tp=2");
}

TEST_CASE("fp16 with a tiny initial loss scale grows it back and trains") {
  LayoutRuns runs(kModel, kTrain, "[plugins.fp16]\ninitial_scale = 1.0\ngrowth_interval = 2\n");
  Curves c = runs.run("--set plugins.precision=fp16");
  std::vector<double> scale = column(c.metrics, "loss_scale"),
                      skipped = column(c.metrics, "skipped_steps");
  REQUIRE(scale.size() == 10);
  CHECK(scale.front() == 1.0);
  CHECK(scale.back() == 32.0);  // x2 every 2 clean steps
  CHECK(skipped.back() == 0.0);
  CHECK(c.loss.back() < c.loss.front());
}

TEST_CASE(
    "an inf on one rank skips the fp16 step on every rank and leaves the weights as they were") {
  LayoutRuns runs(kModel, "steps = 5\nglobal_batch = 4\nlr = 3e-3\nwarmup_steps = 1");
  for (const char* layout :
       {"--set parallel.nproc=2", "--set parallel.nproc=2 --set parallel.tp=2"}) {
    INFO(layout);
    // Rank 1 alone is poisoned; under tp its gradients never meet rank 0's in an all-reduce,
    // only the norm does. The run ends with rc 0 only if the replicas stayed identical.
    Curves c = runs.run(
        std::string(layout) +
        " --set plugins.precision=fp16 --set faults.inf_loss_step=3 --set faults.inf_loss_rank=1");
    std::vector<double> skipped = column(c.metrics, "skipped"),
                        scale = column(c.metrics, "loss_scale"),
                        norm = column(c.metrics, "param_norm");
    REQUIRE(skipped.size() == 5);
    CHECK(skipped == std::vector<double>{0, 0, 1, 0, 0});
    CHECK(scale[1] == 65536.0);
    CHECK(scale[2] == 32768.0);  // backed off
    CHECK(norm[2] == norm[1]);   // the skipped step changed no weight
    CHECK(norm[3] != norm[2]);   // and training goes on
    CHECK(std::isfinite(c.loss[3]));
    CHECK(has(c.out, "step 3: gradients overflowed on some rank; update skipped on every rank"));
  }
  // fp32 has no loss scaler: [stability] skips the step and names where the inf appeared first
  // (backward starts at the head), or fails the run when told to.
  Curves fp32 = runs.run("--set faults.inf_loss_step=2");
  CHECK(column(fp32.metrics, "skipped") == std::vector<double>{0, 1, 0, 0, 0});
  CHECK(has(fp32.out, "step 2: non-finite gradient"));
  CHECK(has(fp32.out, "first in layer head"));
  auto r = runs.raw("--set faults.inf_loss_step=2 --set stability.nonfinite=fail");
  CHECK(r.rc == 1);
  CHECK(has(r.out, "step 2: non-finite gradient"));
}

TEST_CASE(
    "ddp reduce_dtype = bf16 reduces rounded gradients and stays close to the fp32 reduction") {
  LayoutRuns runs(kModel, kTrain);
  Curves one = runs.run("--set plugins.precision=bf16");
  Curves fp32_reduce = runs.run("--set plugins.precision=bf16 --set parallel.nproc=2");
  Curves bf16_reduce = runs.run(
      "--set plugins.precision=bf16 --set parallel.nproc=2 --set plugins.ddp.reduce_dtype=bf16");
  check_same(one, fp32_reduce, 2e-4, "bf16, dp=2, fp32 reduction");
  // Measured 1.5e-5 (loss) and 4.2e-4 (grad norm) from the single-rank run.
  check_same(one, bf16_reduce, 2e-3, "bf16, dp=2, bf16 reduction");
  double most = 0;
  for (size_t s = 0; s < one.grad_norm.size(); ++s)
    most = std::max(most, std::fabs(bf16_reduce.grad_norm[s] - fp32_reduce.grad_norm[s]) /
                              fp32_reduce.grad_norm[s]);
  CHECK(most > 1e-5);  // the gradients really crossed the wire in bf16
  auto bad = runs.raw("--set parallel.nproc=2 --set plugins.ddp.reduce_dtype=fp4");
  CHECK(bad.rc == 2);
  CHECK(has(bad.out, "reduce_dtype must be \"fp32\", \"bf16\" or \"fp8\", got \"fp4\""));
}

// fp8 wires: E4M3 blocks with a scale each, reduced in two moves (all-to-all, then all-gather of
// each rank's mean). The gradients carry E4M3's 3-bit rounding, about 6% per element, which
// averages out in the norm: measured 1.6e-4 (loss) and 6.5e-3 (grad norm) from the single-rank
// bf16 run, which fp8 precision's 1e-2 from fp32 bounds here too.
TEST_CASE(
    "ddp reduce_dtype = fp8 tracks the single-rank run within 1e-2 at dp 2 and 4, a quarter of the "
    "bytes") {
  LayoutRuns runs(kModel, kTrain);
  const Curves one = runs.run("--set plugins.precision=bf16");
  for (int dp : {2, 4}) {
    const std::string layout =
        "--set plugins.precision=bf16 --set parallel.nproc=" + std::to_string(dp);
    const Curves fp32 = runs.run(layout);
    const Curves fp8 =
        runs.run(layout + " --set plugins.ddp.reduce_dtype=fp8 --set plugins.ddp.bucket_mb=0.05");
    check_same(one, fp8, 1e-2, "fp8 wire, dp = " + std::to_string(dp));
    double most = 0;
    for (size_t s = 0; s < one.grad_norm.size(); ++s)
      most = std::max(most, std::fabs(fp8.grad_norm[s] - fp32.grad_norm[s]) / fp32.grad_norm[s]);
    CHECK(most > 1e-4);  // the gradients really crossed in fp8
    // What ddp sent (data_comm_bytes, its own count): 2 (n-1)/n bytes per gradient plus a scale per
    // block, against the fp32 ring's 2 (n-1)/n x 4. Measured 95,232 -> 23,824 bytes at dp 2.
    const double b32 = column(fp32.metrics, "data_comm_bytes").back(),
                 b8 = column(fp8.metrics, "data_comm_bytes").back();
    CHECK(b8 < 0.26 * b32);
    CHECK(b8 > 0.24 * b32);
  }
}

// The same for ZeRO: reduce_dtype = "bf16" sends each unit's gradient reduce-scatter in bf16 and
// widens the reduced piece into the fp32 shard; the parameters' all-gathers stay fp32.
TEST_CASE(
    "zero2 and zero3 reduce_dtype = bf16 track the single-rank bf16 run and halve the gradient "
    "bytes") {
  LayoutRuns runs(kModel, kTrain);
  Curves one = runs.run("--set plugins.precision=bf16");
  for (const char* zero : {"zero2", "zero3"}) {
    const std::string layout =
        std::string("--set plugins.precision=bf16 --set parallel.nproc=2 --set plugins.data=") +
        zero;
    Curves fp32_reduce = runs.run(layout);
    Curves bf16_reduce = runs.run(layout + " --set plugins." + zero + ".reduce_dtype=bf16");
    check_same(one, fp32_reduce, 2e-4, std::string(zero) + ", fp32 reduction");
    check_same(one, bf16_reduce, 2e-3, std::string(zero) + ", bf16 reduction");
    double most = 0;
    for (size_t s = 0; s < one.grad_norm.size(); ++s)
      most = std::max(most, std::fabs(bf16_reduce.grad_norm[s] - fp32_reduce.grad_norm[s]) /
                                fp32_reduce.grad_norm[s]);
    CHECK_MESSAGE(most > 1e-5, zero);  // the gradients really crossed the wire in bf16
    // The dp group's bytes (comm meter): the reduce-scatters' halve, the gathers' stay.
    const std::vector<double> full = column(fp32_reduce.metrics, "comm_bytes_dp"),
                              half = column(bf16_reduce.metrics, "comm_bytes_dp");
    REQUIRE(full.size() == half.size());
    REQUIRE(!full.empty());
    CHECK(half.back() < full.back());
    CHECK(half.back() > full.back() / 2);
  }
  auto bad = runs.raw(
      "--set parallel.nproc=2 --set plugins.data=zero2 --set plugins.zero2.reduce_dtype=fp4");
  CHECK(bad.rc == 2);
  CHECK(has(bad.out, "reduce_dtype"));
  CHECK(has(bad.out, "expected one of \"fp32\", \"bf16\", \"fp8\", got \"fp4\""));
}

// zero3's parameter gathers in bf16: every rank computes with the same bf16-rounded weights (the
// fp32 masters take the update), so the run tracks bf16 on one rank as the bf16 gradient wires
// do, and the gathers' bytes halve.
TEST_CASE(
    "zero3 gather_dtype = bf16 tracks bf16 on one rank within 2e-3 and halves the gathers' bytes") {
  LayoutRuns runs(kModel, kTrain);
  const Curves one = runs.run("--set plugins.precision=bf16");
  const std::string layout =
      "--set plugins.precision=bf16 --set parallel.nproc=2 --set plugins.data=zero3";
  const Curves fp32_gather = runs.run(layout);
  const Curves bf16_gather = runs.run(layout + " --set plugins.zero3.gather_dtype=bf16");
  check_same(one, bf16_gather, 2e-3, "zero3, bf16 gathers");
  double most = 0;
  for (size_t s = 0; s < one.loss.size(); ++s)
    most =
        std::max(most, std::fabs(bf16_gather.loss[s] - fp32_gather.loss[s]) / fp32_gather.loss[s]);
  CHECK(most > 1e-7);  // the weights really crossed in bf16
  const std::vector<double> full = column(fp32_gather.metrics, "comm_bytes_dp"),
                            half = column(bf16_gather.metrics, "comm_bytes_dp");
  REQUIRE(!full.empty());
  REQUIRE(full.size() == half.size());
  // The gathers (forward and backward, every micro-batch) halve; the reduce-scatters stay fp32:
  // measured 338,972 -> 217,116 bytes per step.
  CHECK(half.back() > full.back() / 2);
  CHECK(half.back() < 0.7 * full.back());
  const auto stage2 = runs.raw(
      "--set parallel.nproc=2 --set plugins.data=zero2 --set plugins.zero2.gather_dtype=bf16");
  CHECK(stage2.rc == 2);
  CHECK(has(stage2.out, "gather_dtype = \"bf16\" is for zero3"));
}

// ZeRO's fp8 wires: a reduce-scatter is an all-to-all of E4M3 blocks summed in fp32 on arrival;
// zero3's gathers send one block per rank, so every rank computes with the same E4M3 weights.
// Measured: fp8 reduce-scatters 5.2e-5 (loss) and 2.9e-3 (grad norm) from bf16 on one rank; fp8
// gathers 2.4e-3 and 6.3e-3 from fp8 precision on one rank.
TEST_CASE(
    "zero fp8 wires: reduce-scatters track bf16 on one rank, fp8 gathers fp8 precision, within "
    "1e-2") {
  LayoutRuns runs(kModel, kTrain);
  const Curves bf16 = runs.run("--set plugins.precision=bf16");
  for (const char* zero : {"zero2", "zero3"}) {
    const std::string layout =
        std::string("--set plugins.precision=bf16 --set parallel.nproc=2 --set plugins.data=") +
        zero;
    const Curves fp32_wire = runs.run(layout);
    const Curves fp8_wire = runs.run(layout + " --set plugins." + zero + ".reduce_dtype=fp8");
    check_same(bf16, fp8_wire, 1e-2, std::string(zero) + ", fp8 reduce-scatters");
    const double b32 = column(fp32_wire.metrics, "data_comm_bytes").back(),
                 b8 = column(fp8_wire.metrics, "data_comm_bytes").back();
    CHECK(b8 < b32);  // the gradients' share of the bytes went to a quarter
  }
  const Curves fp8 = runs.run("--set plugins.precision=fp8");
  const std::string zero3 =
      "--set plugins.precision=fp8 --set parallel.nproc=2 --set plugins.data=zero3";
  const Curves fp8_gathers = runs.run(zero3 + " --set plugins.zero3.gather_dtype=fp8");
  check_same(fp8, fp8_gathers, 1e-2, "zero3, fp8 gathers");
  const double b32 = column(runs.run(zero3).metrics, "data_comm_bytes").back();
  CHECK(column(fp8_gathers.metrics, "data_comm_bytes").back() < 0.5 * b32);
}
