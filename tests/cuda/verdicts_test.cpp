// `loom config check` judges a CUDA job from what the device and the comm plugin declare, with
// no GPU: every layout of the composition matrix (bench/compositions.sh's items, alone and in
// pairs) gets the same verdict, in the same words, under strict + gloo and under cuda + nccl.
// Built where the CUDA toolkit is (the nccl plugin exists), run anywhere: no case needs a GPU.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "support/process.hpp"

using namespace loom::test;

namespace {

struct Item {
  const char* name;
  const char* slot;  // two items of one slot cannot compose
  int ranks;
  const char* sets;
};

// bench/compositions.sh's items.
const Item kItems[] = {
    {"ddp", "data", 2, "--set plugins.data=ddp"},
    {"zero1", "data", 2, "--set plugins.data=zero1"},
    {"zero2", "data", 2, "--set plugins.data=zero2"},
    {"zero3", "data", 2, "--set plugins.data=zero3"},
    {"tp", "tp", 2, "--set parallel.tp=2"},
    {"tp+sp", "tp", 2, "--set parallel.tp=2 --set plugins.sequence=sp"},
    {"cp", "cp", 2, "--set parallel.cp=2"},
    {"ep", "ep", 2, "--set parallel.ep=2"},
    {"pp-1f1b", "pp", 2,
     "--set parallel.pp=2 --set plugins.pipeline=1f1b --set train.micro_batch=1"},
    {"pp-interleaved", "pp", 2,
     "--set parallel.pp=2 --set plugins.pipeline=interleaved --set train.micro_batch=1"},
    {"recompute-full", "recompute", 1, "--set model.recompute=full"},
    {"recompute-selective", "recompute", 1, "--set model.recompute=selective"},
    {"bf16", "precision", 1, "--set plugins.precision=bf16"},
    {"fp16", "precision", 1, "--set plugins.precision=fp16"},
    {"fp8", "precision", 1, "--set plugins.precision=fp8"},
    {"async-ckpt", "ckpt", 1, "--set plugins.ckpt=async --set checkpoint.every=2"},
};

// The verdict without the lines that name the device or the comm plugin (the summary of an ok).
std::string verdict(const Result& r) {
  std::string out = "rc " + std::to_string(r.rc) + "\n";
  size_t at = 0;
  while (at < r.out.size()) {
    const size_t end = r.out.find('\n', at);
    const std::string line =
        r.out.substr(at, end == std::string::npos ? std::string::npos : end - at);
    at = end == std::string::npos ? r.out.size() : end + 1;
    if (line.find("error") != std::string::npos) out += line + "\n";
  }
  return out;
}

}  // namespace

TEST_CASE(
    "config check: every composition gets one verdict under strict + gloo and cuda + nccl, ZeRO "
    "accepted on both") {
  TempDir t;
  std::string text;
  for (int i = 0; i < 400; ++i)
    text += "a device's layouts are judged without the device " + std::to_string(i % 7) + "\n";
  t.write("c.txt", text);
  REQUIRE(run_loom("data prepare --text " + (t.path / "c.txt").string() + " --out " +
                   (t.path / "d").string())
              .rc == 0);
  const std::string data = "[data]\ndir = \"" + (t.path / "d").string() +
                           "\"\n[train]\nsteps = 2\nglobal_batch = 8\nlr = 1e-3\neval_every = 0\n";
  const std::string dense =
      t.write("dense.toml", "[model]\npreset = \"llama-tiny\"\nseq_len = 16\n" + data);
  const std::string moe = t.write("moe.toml",
                                  "[model]\npreset = \"llama-tiny\"\nseq_len = 16\n"
                                  "moe = { experts = 4, top_k = 2, every = 2 }\n" +
                                      data);
  std::vector<std::vector<const Item*>> cells;
  for (const Item& a : kItems) {
    cells.push_back({&a});
    for (const Item& b : kItems)
      if (&a < &b && std::string(a.slot) != b.slot) cells.push_back({&a, &b});
  }
  int refused = 0, zero_accepted = 0;
  for (const auto& cell : cells) {
    int ranks = 1;
    std::string sets, name;
    bool experts = false, zero = false;
    for (const Item* i : cell) {
      ranks *= i->ranks, sets += std::string(" ") + i->sets,
          name += std::string(name.empty() ? "" : " x ") + i->name;
      experts = experts || std::string(i->slot) == "ep";
      zero = zero || std::string(i->name).rfind("zero", 0) == 0;
    }
    const std::string base = "config check " + (experts ? moe : dense) +
                             " --set parallel.nproc=" + std::to_string(ranks) + sets;
    const Result strict = run_loom(base + " --set run.device=strict --set plugins.comm=gloo");
    const Result cuda = run_loom(base + " --set run.device=cuda --set plugins.comm=nccl");
    INFO(name << "\nstrict + gloo:\n" << strict.out << "\ncuda + nccl:\n" << cuda.out);
    CHECK(verdict(strict) == verdict(cuda));
    refused += strict.rc != 0;
    if (zero) {  // zero1-3 keep their state in device memory (LOOM_DATA_DEVICE)
      CHECK(cuda.out.find("LOOM_DATA_DEVICE") == std::string::npos);
      zero_accepted += cuda.rc == 0;
    }
  }
  CHECK(zero_accepted > 0);
  CHECK(refused < static_cast<int>(cells.size()));  // most compositions run on a device
}
