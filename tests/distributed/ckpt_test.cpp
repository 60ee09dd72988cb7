// Checkpoints: bitwise resume (one rank, and dp=2 x tp=2 with the async writer), loading into
// another layout, retention, the tools, and the faults that must never lose the previous one.
#include <doctest/doctest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "support/layouts.hpp"

using namespace loom::test;
namespace fs = std::filesystem;

namespace {
bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}
const char* kModel = "n_layer = 2\nn_head = 4\nd_model = 32\nd_ff = 64\nseq_len = 16";
const char* kTrain = "steps = 20\nglobal_batch = 4\nlr = 3e-3\nwarmup_steps = 2";

}  // namespace

TEST_CASE(
    "resume is bitwise: 20 steps straight equal 10 + resume + 10 (1 rank sync, dp=2 x tp=2 "
    "async)") {
  LayoutRuns runs(kModel, kTrain);
  for (std::string layout :
       {"--set plugins.ckpt=sync",
        "--set plugins.ckpt=async --set parallel.nproc=4 --set parallel.tp=2"}) {
    INFO(layout);
    Curves full = runs.run(layout);
    TempDir t;
    const std::string dir = (t.path / "run").string(),
                      common = layout + " --set checkpoint.every=5 --run-dir " + dir;
    auto first = run_loom("train " + runs.config() + " " + common + " --set train.exit_after=10");
    REQUIRE(first.rc == 0);
    CHECK(has(first.out, "step-00000010 committed"));
    auto second =
        run_loom("train " + runs.config() + " " + common + " --set checkpoint.resume=latest");
    INFO(second.out);
    REQUIRE(second.rc == 0);
    CHECK(has(second.out, "resumed from " + dir + "/checkpoints/step-00000010: step 10 done"));
    check_bitwise(full, {column(fs::path(dir) / "metrics.jsonl", "loss"),
                         column(fs::path(dir) / "metrics.jsonl", "grad_norm"),
                         {},
                         {}});
  }
}

TEST_CASE("a dp=2 x tp=2 checkpoint continues under tp=4 as it would have under dp=2 x tp=2") {
  LayoutRuns runs(kModel, kTrain);
  check_reshard(runs, "--set parallel.nproc=4 --set parallel.tp=2", 10,
                {"--set parallel.nproc=4 --set parallel.tp=4", "--set parallel.nproc=1"}, 1e-5);
}

TEST_CASE("retention keeps the newest checkpoints, verify, inspect and a safetensors export") {
  LayoutRuns runs(kModel, "steps = 10\nglobal_batch = 4");
  TempDir t;
  const fs::path ck = t.path / "ck";
  fs::create_directories(ck / "step-00000001-keep");  // a user's copy: not the writer's to retire
  REQUIRE(runs.raw("--set plugins.ckpt=sync --set checkpoint.every=2 --set checkpoint.keep_last=2 "
                   "--set checkpoint.dir=" +
                   ck.string())
              .rc == 0);
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(ck)) left.push_back(e.path().filename().string());
  std::sort(left.begin(), left.end());
  CHECK(left == std::vector<std::string>{".lock", "latest", "step-00000001-keep", "step-00000008",
                                         "step-00000010"});
  CHECK(read_text(ck / "latest") == "step-00000010\n");

  auto ok = run_loom("ckpt verify " + ck.string());
  CHECK(ok.rc == 0);
  CHECK(has(ok.out, "step-00000010: complete, 2 files checked (crc32c)"));
  auto info = run_loom("ckpt inspect " + (ck / "step-00000008").string());
  CHECK(has(info.out, "step 8 (optimizer step 8), precision fp32"));
  CHECK(has(info.out, "h1.mlp.fc.w.adam_v"));
  const fs::path st = t.path / "model.safetensors";
  auto ex = run_loom("ckpt export " + ck.string() + " --format safetensors --out " + st.string());
  REQUIRE(ex.rc == 0);
  // The file as the safetensors format defines it: u64 LE header size, JSON header, raw data.
  const std::string bytes = read_text(st);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  auto header = nlohmann::json::parse(bytes.substr(8, n));
  CHECK(header["wte"]["dtype"] == "F32");
  CHECK(header["wte"]["shape"] == std::vector<int64_t>{256, 32});
  CHECK(header["__metadata__"]["loom_step"] == "10");
  CHECK_FALSE(header.contains("wte.adam_m"));  // weights only
  size_t end = 0;
  for (auto& [k, v] : header.items())
    if (k != "__metadata__") end = std::max<size_t>(end, v["data_offsets"][1].get<size_t>());
  CHECK(bytes.size() == 8 + n + end);
}

TEST_CASE(
    "a flipped byte and a damaged manifest are named, resume = latest does not fall back quietly") {
  LayoutRuns runs(kModel, "steps = 4\nglobal_batch = 4");
  TempDir t;
  const fs::path ck = t.path / "ck";
  REQUIRE(runs.raw("--set plugins.ckpt=sync --set checkpoint.every=2 --set checkpoint.dir=" +
                   ck.string())
              .rc == 0);
  {
    std::fstream f(ck / "step-00000004" / "rank-00000.bin",
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(100);
    char c;
    f.get(c);
    f.seekp(100);
    f.put(static_cast<char>(c ^ 0x10));
  }
  auto v = run_loom("ckpt verify " + (ck / "step-00000004").string());
  CHECK(v.rc == 1);
  CHECK(has(v.out, "rank-00000.bin (holds "));
  CHECK(has(v.out, "checksum mismatch"));
  auto r = runs.raw("--set checkpoint.dir=" + ck.string() +
                    " --set checkpoint.resume=latest --set train.steps=6");
  CHECK(r.rc == 1);
  CHECK(has(r.out, "cannot resume: checkpoint file"));
  CHECK(has(r.out, "not falling back to an older checkpoint on my own"));
  CHECK(run_loom("ckpt verify " + (ck / "step-00000002").string()).rc ==
        0);  // the previous one is whole

  const fs::path man = ck / "step-00000002" / "manifest.json";
  const std::string text = read_text(man);
  std::ofstream(man, std::ios::trunc) << text.substr(0, text.size() / 2);  // truncated
  auto cut = run_loom("ckpt verify " + (ck / "step-00000002").string());
  CHECK(cut.rc == 1);
  CHECK(has(cut.out, "manifest.json is damaged"));
  std::string edited = text;
  edited.replace(edited.find("\"step\""), 6, "\"stop\"");  // hand-edited
  std::ofstream(man, std::ios::trunc) << edited;
  auto ed = run_loom("ckpt inspect " + (ck / "step-00000002").string());
  CHECK(ed.rc == 1);
  CHECK(has(ed.out, "manifest.json is damaged"));
  // An edit that still parses but points outside the data is refused before anything is read.
  std::string outside = text;
  outside.replace(outside.find("\"offset\": 0"), 11, "\"offset\": 999999999");
  std::ofstream(man, std::ios::trunc) << outside;
  auto off = run_loom("ckpt export " + (ck / "step-00000002").string() + " --out " +
                      (t.path / "x.safetensors").string());
  CHECK(off.rc == 1);
  CHECK(has(off.out, "lies outside its file"));
  // Numbers that wrap around or make no sense are refused the same way, for export and resume.
  auto edit = [&](const std::string& from, const std::string& to) {
    std::string e = text;
    e.replace(e.find(from), from.size(), to);
    std::ofstream(man, std::ios::trunc) << e;
  };
  const std::string resume = "--set checkpoint.dir=" + ck.string() +
                             " --set checkpoint.resume=" + (ck / "step-00000002").string() +
                             " --set train.steps=6";
  edit("\"offset\": 0", "\"offset\": 9223372036854775000");
  for (const auto& r : {run_loom("ckpt export " + (ck / "step-00000002").string() + " --out " +
                                 (t.path / "y.safetensors").string()),
                        runs.raw(resume)}) {
    CHECK(r.rc == 1);
    CHECK(has(r.out, "lies outside its file"));
  }
  edit("\"step\": 2", "\"step\": -5");
  auto negative = runs.raw(resume);
  CHECK(negative.rc == 1);
  CHECK(has(negative.out, "\"step\" is -5; a step count is 0 or more"));
  edit("\"applied\": 2", "\"applied\": -1");
  auto applied = runs.raw(resume);
  CHECK(applied.rc == 1);
  CHECK(has(applied.out, "\"applied\" is -1; the updates applied are from 0 to the step (2)"));
}

TEST_CASE("a write error during a save is reported and the previous checkpoint stays whole") {
  LayoutRuns runs(kModel, "steps = 6\nglobal_batch = 4");
  TempDir t;
  const fs::path ck = t.path / "ck";
  for (const char* writer : {"sync", "async"}) {
    INFO(writer);
    fs::remove_all(ck);
    auto r = runs.raw(std::string("--set plugins.ckpt=") + writer +
                      " --set checkpoint.every=2 --set faults.ckpt_write_error_step=4 "
                      "--set checkpoint.dir=" +
                      ck.string());
    CHECK(r.rc == 1);
    CHECK(has(r.out, "step-00000004"));
    CHECK(has(r.out, "cannot create"));
    CHECK(read_text(ck / "latest") == "step-00000002\n");
    CHECK(run_loom("ckpt verify " + ck.string()).rc == 0);
  }
}

TEST_CASE(
    "kill -9 while an async save is in flight: the previous checkpoint is intact and resume uses "
    "it") {
  LayoutRuns runs(kModel, "steps = 1000000\nglobal_batch = 4");
  TempDir t;
  const fs::path ck = t.path / "ck", log = t.path / "out.txt";
  // Saves every 200 steps; step N's save is committed at step N + 200, so once step 200's
  // commit is printed, step 400's is in flight until step 600.
  const std::string cmd = "LOOM_PLUGIN_PATH=" LOOM_TEST_PLUGIN_DIR " " LOOM_BIN " train " +
                          runs.config() + " --run-dir " + (t.path / "run").string() +
                          " --set plugins.ckpt=async --set checkpoint.every=200 "
                          "--set run.log_every=100000 --set checkpoint.dir=" +
                          ck.string();
  auto bg = sh("(" + cmd + " > " + log.string() + " 2>&1 & echo $!)");
  const std::string pid = bg.out.substr(0, bg.out.find('\n'));
  bool seen = false;
  for (int i = 0; i < 3000 && !seen; ++i) {
    seen = has(read_text(log), "step-00000200 committed");
    if (!seen) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  sh("kill -9 " + pid);
  REQUIRE(seen);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  CHECK(read_text(ck / "latest") == "step-00000200\n");
  CHECK(run_loom("ckpt verify " + ck.string()).rc == 0);
  auto r = runs.raw("--set checkpoint.dir=" + ck.string() +
                    " --set checkpoint.resume=latest --set train.steps=205");
  INFO(r.out);
  CHECK(r.rc == 0);
  CHECK(has(r.out, "step-00000200: step 200 done"));
}
