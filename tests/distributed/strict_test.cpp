// The strict emulated device ([run] device = "strict") against the CPU: the same runs, bit for
// bit, with device memory the host cannot touch, kernels on stream workers and gloo staged
// through pinned copies; ZeRO's state and every narrow wire on the device. And the two test plugins
// that break the contract on purpose are named.
#include <doctest/doctest.h>

#include <fstream>
#include <iterator>

#include "support/layouts.hpp"

using namespace loom::test;

namespace {

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

const char* kLlama = "preset = \"llama-tiny\"\nseq_len = 16";
const char* kGpt = "preset = \"gpt2-tiny\"\nseq_len = 16";
const char* kTrain = "steps = 6\nglobal_batch = 4\nlr = 1e-3\nwarmup_steps = 2";
const char* kStrict = " --set run.device=strict";

}  // namespace

TEST_CASE("strict device: llama-tiny and gpt2-tiny (fp32, bf16) train bit for bit as on the CPU") {
  for (const char* model : {kLlama, kGpt}) {
    LayoutRuns runs(model, kTrain);
    for (const char* sets :
         {"--set parallel.nproc=1", "--set parallel.nproc=1 --set plugins.precision=bf16"}) {
      Curves cpu = runs.run(std::string(sets));
      Curves strict = runs.run(std::string(sets) + kStrict);
      check_same(cpu, strict, 0.0, std::string(model) + " " + sets);
    }
  }
}

TEST_CASE(
    "strict device: dp2 (buckets during backward or after it, bf16 and fp8 wires) and pp2 over "
    "gloo, staged through pinned copies, equal the CPU run") {
  LayoutRuns runs(kLlama, kTrain);
  for (const char* layout :
       {"--set parallel.nproc=2", "--set parallel.nproc=2 --set plugins.ddp.overlap=false",
        "--set parallel.nproc=2 --set plugins.ddp.reduce_dtype=bf16",
        "--set parallel.nproc=2 --set plugins.ddp.reduce_dtype=fp8",
        "--set parallel.nproc=2 --set parallel.pp=2"}) {
    const std::string sets = layout;
    check_same(runs.run(sets), runs.run(sets + kStrict), 0.0, sets + " on strict");
  }
}

// ZeRO's shards, buckets, gathered layers and wire buffers are device memory: a host touch would
// fault, and an unordered copy between the streams would be named. Every stage and wire.
TEST_CASE(
    "strict device: zero1, zero2 and zero3 at dp2 with fp32, bf16 and fp8 wires, and zero3 at dp2 "
    "x tp2, equal the CPU run") {
  LayoutRuns runs(kLlama, kTrain);
  for (const char* stage : {"zero1", "zero2", "zero3"})
    for (const char* wire : {"fp32", "bf16", "fp8"}) {
      const std::string z = std::string(" --set plugins.") + stage;
      std::string sets = std::string("--set parallel.nproc=2 --set plugins.data=") + stage + z +
                         ".reduce_dtype=" + wire;
      if (std::string(stage) == "zero3") sets += z + ".gather_dtype=" + wire;
      check_same(runs.run(sets), runs.run(sets + kStrict), 0.0, sets + " on strict");
    }
  const std::string tp = "--set parallel.nproc=4 --set parallel.tp=2 --set plugins.data=zero3";
  check_same(runs.run(tp), runs.run(tp + kStrict), 0.0, tp + " on strict");
}

// The shard pieces cross between host files and device memory by the table's copies, so a
// checkpoint does not know which device wrote it.
TEST_CASE(
    "strict device: a zero3 checkpoint saved on it resumes bitwise on the CPU, and the other way "
    "round") {
  LayoutRuns runs(kLlama, kTrain);
  TempDir t;
  const std::string z3 =
      "--set parallel.nproc=2 --set plugins.data=zero3 --set plugins.ckpt=sync --set "
      "checkpoint.every=3";
  const std::string on_strict = (t.path / "strict").string(), on_cpu = (t.path / "cpu").string();
  const Curves full = runs.run(z3 + " --set checkpoint.dir=" + on_cpu);
  const Curves strict = runs.run(z3 + kStrict + " --set checkpoint.dir=" + on_strict);
  check_same(full, strict, 0.0, "zero3 on strict");
  const std::string step3 = "/step-00000003";
  for (const auto& [from, sets] :
       {std::pair{on_strict, std::string()}, std::pair{on_cpu, std::string(kStrict)}}) {
    const Curves resumed = runs.run(z3 + sets + " --set checkpoint.resume=" + from + step3);
    INFO("resumed from " << from << sets);
    REQUIRE(resumed.loss.size() == 3);
    for (size_t s = 0; s < 3; ++s) {
      CHECK(resumed.loss[s] == full.loss[s + 3]);
      CHECK(resumed.grad_norm[s] == full.grad_norm[s + 3]);
    }
  }
}

TEST_CASE(
    "strict device: pp2 with tied embeddings (gpt2) under 1f1b, interleaved and zbh1 equals the "
    "CPU run") {
  // The tied embedding's gradient is summed between the first and last stage on the device.
  LayoutRuns runs("preset = \"gpt2-tiny\"\nseq_len = 16\nn_layer = 4", kTrain);
  for (const char* schedule : {"1f1b", "interleaved", "zbh1"}) {
    const std::string sets = std::string(
                                 "--set parallel.nproc=2 --set parallel.pp=2 --set "
                                 "train.micro_batch=1 --set plugins.pipeline=") +
                             schedule;
    check_same(runs.run(sets), runs.run(sets + kStrict), 0.0, sets + " on strict");
  }
}

TEST_CASE(
    "strict device: tp2, tp2+sp (gpt2-tiny: a learned position table) and cp2 (ring and "
    "all-gather) equal the CPU run") {
  LayoutRuns runs(kGpt, kTrain);
  for (const char* layout :
       {"--set parallel.nproc=2 --set parallel.tp=2",
        "--set parallel.nproc=2 --set parallel.tp=2 --set plugins.sequence=sp",
        "--set parallel.nproc=2 --set parallel.cp=2",
        "--set parallel.nproc=2 --set parallel.cp=2 --set plugins.cp.algorithm=allgather"}) {
    const std::string sets = layout;
    check_same(runs.run(sets), runs.run(sets + kStrict), 0.0, sets + " on strict");
  }
}

TEST_CASE(
    "strict device: a MoE llama-tiny on one rank and under ep2 (routing and row moves as op-table "
    "kernels) equals the CPU run") {
  LayoutRuns runs(std::string(kLlama) +
                      "\n[model.moe]\nexperts = 4\ntop_k = 2\nevery = 2\ncapacity_factor = 1.0",
                  kTrain);
  for (const char* layout :
       {"--set parallel.nproc=1", "--set parallel.nproc=2 --set parallel.ep=2"}) {
    const std::string sets = layout;
    check_same(runs.run(sets), runs.run(sets + kStrict), 0.0, sets + " on strict");
  }
}

TEST_CASE(
    "strict device: fp16 and fp8 (their scales read back through copies) and full recompute equal "
    "the CPU run") {
  LayoutRuns runs(kLlama, kTrain);
  for (const char* sets : {"--set plugins.precision=fp16", "--set plugins.precision=fp8",
                           "--set model.recompute=full"})
    check_same(runs.run(sets), runs.run(std::string(sets) + kStrict), 0.0,
               std::string(sets) + " on strict");
}

TEST_CASE("strict device: the checkpoints it writes are byte for byte the CPU run's") {
  LayoutRuns runs(kLlama, kTrain, "[plugins]\nckpt = \"sync\"\n[checkpoint]\nevery = 3\n");
  auto cpu = runs.raw("--set parallel.nproc=1");
  REQUIRE(cpu.rc == 0);
  const std::filesystem::path cpu_dir = runs.raw_dir();
  auto strict = runs.raw(std::string("--set parallel.nproc=1") + kStrict);
  INFO(strict.out);
  REQUIRE(strict.rc == 0);
  for (const char* step : {"step-00000003", "step-00000006"}) {
    auto bytes = [&](const std::filesystem::path& run) {
      std::ifstream in(run / "checkpoints" / step / "rank-00000.bin", std::ios::binary);
      return std::string(std::istreambuf_iterator<char>(in), {});
    };
    const std::string a = bytes(cpu_dir), b = bytes(runs.raw_dir());
    CHECK(!a.empty());
    CHECK(a == b);
  }
}

TEST_CASE(
    "strict device: a plugin that dereferences a device pointer, or reads before waiting on an "
    "event, is named") {
  LayoutRuns runs(kLlama, "steps = 2\nglobal_batch = 4\nlr = 1e-3\nwarmup_steps = 1");
  const std::string base = "--set parallel.nproc=2" + std::string(kStrict);
  auto touch = runs.raw(base + " --set plugins.comm=hosttouch");
  INFO(touch.out);
  CHECK(touch.rc == 1);
  CHECK(has(touch.out, "strict device: host code in libloom-precision-hosttouch.so"));
  CHECK(has(touch.out, "dereferenced device memory"));
  CHECK(has(touch.out, "job failed: rank"));
  auto nowait = runs.raw(base + " --set plugins.comm=nowait");
  INFO(nowait.out);
  CHECK(nowait.rc == 1);
  CHECK(has(nowait.out, "op 'copy' on the comm stream reads"));
  // The kernel named is the last to write the gradient before the copy (a GEMM of backward).
  CHECK(has(nowait.out, "on the compute stream writes, without waiting on that op's event"));
  CHECK(has(nowait.out, "called from libloom-precision-nowait.so"));
}
