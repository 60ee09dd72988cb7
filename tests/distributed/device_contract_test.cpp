// What the strict device proves for the CUDA backend's host side (issue: the CUDA backend on the
// device contract): how often the host waits on the device per step, that the sends and receives
// of a pipeline and of ring attention go out in groups that pair up between ranks (as NCCL needs
// to not deadlock), that a full device fails naming the tensor while the checkpoints survive, and
// that a comm plugin must declare point-to-point to be used for it.
#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <tuple>

#include "support/layouts.hpp"

using namespace loom::test;

namespace {

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

const char* kLlama = "preset = \"llama-tiny\"\nseq_len = 16";
const char* kTrain = "steps = 4\nglobal_batch = 4\nlr = 1e-3\nwarmup_steps = 2";
const char* kStrict = " --set run.device=strict";

// One transfer of a recorded group, as gloo's record_groups writes it: "send 1 7 4096".
struct Op {
  bool send = false;
  int peer = 0;
  long tag = 0, bytes = 0;
};
using Group = std::vector<Op>;

// Every rank's groups, by communicator and rank in it, in issue order.
std::map<std::pair<std::string, int>, std::vector<Group>> read_groups(
    const std::filesystem::path& prefix, int world) {
  std::map<std::pair<std::string, int>, std::vector<Group>> out;
  for (int r = 0; r < world; ++r) {
    std::ifstream in(prefix.string() + ".rank" + std::to_string(r));
    REQUIRE(in.good());
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string comm, rank, kind, ops;
      std::getline(fields, comm, '\t');
      std::getline(fields, rank, '\t');
      std::getline(fields, kind, '\t');
      std::getline(fields, ops);
      Group g;
      std::istringstream each(ops);
      std::string one;
      while (std::getline(each, one, ';')) {
        std::istringstream words(one);
        std::string dir;
        Op op;
        words >> dir >> op.peer >> op.tag >> op.bytes;
        op.send = dir == "send";
        g.push_back(op);
      }
      out[{comm, std::stoi(rank)}].push_back(g);
    }
  }
  return out;
}

// The part of a group that goes to or comes from `peer`, as (direction, tag, bytes), sorted.
std::vector<std::tuple<bool, long, long>> with(const Group& g, int peer, bool mirrored) {
  std::vector<std::tuple<bool, long, long>> v;
  for (const Op& op : g)
    if (op.peer == peer) v.emplace_back(op.send != mirrored, op.tag, op.bytes);
  std::sort(v.begin(), v.end());
  return v;
}

// For every two ranks of a communicator: the k-th group of one that talks to the other holds
// exactly the mirror of the other's k-th such group. Returns how many groups were paired, and
// how many of them held a send and a receive together.
std::pair<int, int> check_pairing(
    const std::map<std::pair<std::string, int>, std::vector<Group>>& groups,
    const std::string& what) {
  int paired = 0, both = 0;
  for (const auto& [a_key, a_groups] : groups)
    for (const auto& [b_key, b_groups] : groups) {
      if (a_key.first != b_key.first || a_key.second >= b_key.second) continue;
      const int a = a_key.second, b = b_key.second;
      std::vector<std::vector<std::tuple<bool, long, long>>> from_a, from_b;
      for (const Group& g : a_groups)
        if (auto v = with(g, b, false); !v.empty()) from_a.push_back(v);
      for (const Group& g : b_groups)
        if (auto v = with(g, a, true); !v.empty()) from_b.push_back(v);
      INFO(what << ": communicator " << a_key.first << ", ranks " << a << " and " << b);
      REQUIRE(from_a.size() == from_b.size());
      for (size_t k = 0; k < from_a.size(); ++k) CHECK(from_a[k] == from_b[k]);
      paired += static_cast<int>(from_a.size());
      for (const auto& v : from_a)
        both += std::any_of(v.begin(), v.end(), [](auto& o) { return std::get<0>(o); }) &&
                std::any_of(v.begin(), v.end(), [](auto& o) { return !std::get<0>(o); });
    }
  return {paired, both};
}

std::vector<double> host_waits(const Curves& c) { return column(c.metrics, "host_waits"); }

}  // namespace

TEST_CASE("strict device: the host waits on the device a listed number of times per step") {
  LayoutRuns runs(kLlama, kTrain);
  // The budget per step, on the lead rank. Every wait there is one the contract names:
  //   the loss: each micro-batch's per-row losses come back to the host (softmax_xent)  1 each
  //   the gradient norm: every tensor's sum of squares in one call (sum_squares_multi)  1
  //   gloo on a device: a gradient bucket or an activation staged out to pinned memory,
  //     and a received gradient's pinned block freed after its copy back                1 each
  struct Budget {
    const char* sets;
    double waits;
  };
  for (const Budget b :
       {Budget{"--set parallel.nproc=1", 2},                            // loss + norm
        Budget{"--set parallel.nproc=1 --set train.micro_batch=2", 3},  // two losses + norm
        Budget{"--set parallel.nproc=2", 3},                            // + the one gradient bucket
        Budget{"--set parallel.nproc=2 --set parallel.pp=2 --set train.micro_batch=1", 9}}) {
    // pp2 rank 0: the norm + 4 activations out + 4 gradients in (its stage computes no loss)
    const std::vector<double> waits = host_waits(runs.run(std::string(b.sets) + kStrict));
    INFO(b.sets);
    REQUIRE(waits.size() == 4);
    for (double w : waits) CHECK(w == waits.front());  // a count, the same every step
    CHECK(waits.front() <= b.waits);
    CHECK(waits.front() > 0);
  }
}

// Host code that reads device data (a loss computed over logits brought to the host, a router
// over copies of its logits) shows as bytes copied out of device memory on the compute stream
// (tests/unit/strict_device_test.cpp holds the count to the copies). tp's vocab-parallel loss
// runs as kernels around its all-reduces, ZeRO keeps its state on the device, and a MoE layer
// routes with the op table's kernels, which hand the host only each token's experts and each
// sequence's sums: none of these layouts copies a byte out during a step. gloo's staging runs
// on the comm stream and is not counted (NCCL needs none).
TEST_CASE(
    "strict device: one rank, tp2 (gpt2, the vocab-parallel loss), zero1-3 and MoE (one rank, ep2) "
    "copy nothing out of device memory during a step") {
  LayoutRuns llama(kLlama, kTrain), gpt("preset = \"gpt2-tiny\"\nseq_len = 16", kTrain);
  LayoutRuns moe(std::string(kLlama) +
                     "\n[model.moe]\nexperts = 4\ntop_k = 2\nevery = 2\ncapacity_factor = 1.0",
                 kTrain);
  struct Layout {
    LayoutRuns* runs;
    const char* sets;
  };
  for (const Layout l : {Layout{&llama, "--set parallel.nproc=1"},
                         Layout{&gpt, "--set parallel.nproc=2 --set parallel.tp=2"},
                         Layout{&llama, "--set parallel.nproc=2 --set parallel.tp=2"},
                         Layout{&llama, "--set parallel.nproc=2 --set plugins.data=zero1"},
                         Layout{&llama, "--set parallel.nproc=2 --set plugins.data=zero2"},
                         Layout{&llama, "--set parallel.nproc=2 --set plugins.data=zero3"},
                         Layout{&moe, "--set parallel.nproc=1"},
                         Layout{&moe, "--set parallel.nproc=2 --set parallel.ep=2"}}) {
    const std::vector<double> bytes =
        column(l.runs->run(std::string(l.sets) + kStrict).metrics, "host_read_bytes");
    INFO(std::string(l.sets));
    REQUIRE(bytes.size() == 4);
    for (double b : bytes) CHECK(b == 0);
  }
}

TEST_CASE(
    "strict device: grouped sends and receives pair up between ranks under pp2 (1f1b, interleaved, "
    "zbh1) and ring cp2") {
  LayoutRuns runs("preset = \"gpt2-tiny\"\nseq_len = 16\nn_layer = 4", kTrain);
  TempDir t;
  int n = 0;
  for (const char* layout :
       {"--set parallel.pp=2 --set train.micro_batch=1 --set plugins.pipeline=1f1b",
        "--set parallel.pp=2 --set train.micro_batch=1 --set plugins.pipeline=interleaved",
        "--set parallel.pp=2 --set train.micro_batch=1 --set plugins.pipeline=zbh1",
        "--set parallel.cp=2"}) {
    const std::filesystem::path prefix = t.path / ("groups" + std::to_string(n++));
    runs.run(std::string("--set parallel.nproc=2 ") + layout +
             " --set plugins.gloo.record_groups=" + prefix.string() + kStrict);
    const auto [paired, both] = check_pairing(read_groups(prefix, 2), layout);
    INFO(layout);
    CHECK(paired >= 8);  // 4 steps of at least 4 micro-batches' (or ring steps') transfers
    // Steady 1f1b sends one micro-batch's activations while it receives another's gradient;
    // every ring step sends one block while it receives the next. (zbh1's timeline never
    // puts the two at one point on a stage.)
    if (std::string(layout).find("zbh1") == std::string::npos) CHECK(both > 0);
  }
}

TEST_CASE(
    "strict device: past [run] device_memory_mib a run fails naming the tensor, and its "
    "checkpoints still load") {
  LayoutRuns runs(kLlama, kTrain, "[plugins]\nckpt = \"sync\"\n[checkpoint]\nevery = 2\n");
  auto first = runs.raw(std::string("--set parallel.nproc=1") + kStrict);
  INFO(first.out);
  REQUIRE(first.rc == 0);
  const std::filesystem::path dir = runs.raw_dir();
  auto full =
      runs.raw(std::string("--set parallel.nproc=1 --set run.device_memory_mib=0.01") + kStrict);
  INFO(full.out);
  CHECK(full.rc != 0);
  CHECK(has(full.out, "loom: error: allocating the layers' shared scratch [64 x 64] f32: "));
  CHECK(has(full.out, "strict device: out of device memory: asked"));
  CHECK(has(full.out, "left of the 0.01 MiB cap ([run] device_memory_mib)"));
  auto verify = run_loom("ckpt verify " + (dir / "checkpoints" / "step-00000004").string());
  INFO(verify.out);
  CHECK(verify.rc == 0);
  // On the CPU there is no device memory to cap: refused by train and by config check alike.
  for (const std::string command :
       {"train " + runs.config() + " --run-dir " + (dir.parent_path() / "cpu").string(),
        "config check " + runs.config()}) {
    auto cpu = run_loom(command + " --set parallel.nproc=1 --set run.device_memory_mib=64");
    INFO(command);
    CHECK(cpu.rc == 2);
    CHECK(has(cpu.out, "[run] device_memory_mib caps a device's memory (strict, cuda)"));
  }
}

TEST_CASE(
    "a comm plugin with send and recv that does not declare LOOM_COMM_P2P is refused for pp and "
    "cp, named") {
  LayoutRuns runs(kLlama, kTrain);
  for (const char* layout : {"--set parallel.pp=2", "--set parallel.cp=2"}) {
    auto r =
        runs.raw(std::string("--set parallel.nproc=2 ") + layout +
                 " --set plugins.comm=" LOOM_TEST_PLUGIN_DIR "/libloom-precision-undeclared.so");
    INFO(r.out);
    CHECK(r.rc == 2);
    CHECK(has(
        r.out,
        "[plugins] comm = \"undeclared\" has send and recv but does not declare LOOM_COMM_P2P"));
    CHECK(has(r.out, "needs point-to-point transfers"));
  }
}
