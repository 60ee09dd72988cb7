// What the runtime guarantees a third-party plugin (ABI 1.6), each shown with a test plugin from
// tests/plugins: declared capabilities, data-plugin state in checkpoints, a writer with a format of
// its own read back, a plugin that wraps another, option rules, and shadowing made visible.
#include <doctest/doctest.h>

#include <fstream>
#include <sstream>

#include "support/layouts.hpp"

using namespace loom::test;
namespace fs = std::filesystem;

namespace {
bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}
const char* kModel = "n_layer = 2\nn_head = 4\nd_model = 32\nd_ff = 64\nseq_len = 16";
const char* kTrain = "steps = 10\nglobal_batch = 4\nlr = 3e-3\nwarmup_steps = 2";
}  // namespace

TEST_CASE(
    "a data plugin that does not declare experts or pipeline is refused under ep or pp, naming "
    "both") {
  LayoutRuns moe(std::string(kModel) + "\nvocab_size = 130\n[model.moe]\nexperts = 4\ntop_k = 2",
                 kTrain);
  auto ep = moe.raw("--set parallel.nproc=2 --set parallel.ep=2 --set plugins.data=ema");
  CHECK(ep.rc == 2);
  CHECK(has(ep.out,
            "[plugins] data = \"ema\" does not declare LOOM_DATA_EXPERTS, and [parallel] ep = 2 "
            "needs it"));
  LayoutRuns dense(kModel, kTrain);
  auto pp = dense.raw("--set parallel.nproc=4 --set parallel.pp=2 --set plugins.data=ema");
  CHECK(pp.rc == 2);
  CHECK(has(pp.out,
            "[plugins] data = \"ema\" does not declare LOOM_DATA_PIPELINE, and [parallel] pp = 2 "
            "needs it"));
  auto info = run_loom("plugins info zero2");
  CHECK(has(info.out, "declares:  experts, pipeline, sharded state, device state"));
}

TEST_CASE("a data plugin's own state is saved per rank and restored: dp = 2 resumes bitwise") {
  LayoutRuns runs(kModel, kTrain);
  const std::string ema = "--set parallel.nproc=2 --set plugins.data=ema";
  Curves full = runs.run(ema);
  Curves plain = runs.run("--set parallel.nproc=2");
  CHECK(full.loss.back() != plain.loss.back());  // the state changes training: losing it would show
  TempDir t;
  const std::string dir = (t.path / "run").string(),
                    common =
                        ema + " --set plugins.ckpt=sync --set checkpoint.every=5 --run-dir " + dir;
  REQUIRE(run_loom("train " + runs.config() + " " + common + " --set train.exit_after=5").rc == 0);
  const std::string manifest =
      read_text(fs::path(dir) / "checkpoints" / "step-00000005" / "manifest.json");
  CHECK(has(manifest, "data-state-00000.bin"));
  CHECK(has(manifest, "data-state-00001.bin"));
  auto second =
      run_loom("train " + runs.config() + " " + common + " --set checkpoint.resume=latest");
  INFO(second.out);
  REQUIRE(second.rc == 0);
  check_bitwise(full, {column(fs::path(dir) / "metrics.jsonl", "loss"),
                       column(fs::path(dir) / "metrics.jsonl", "grad_norm"),
                       {},
                       {}});
  // Another layout cannot take per-rank state: the plugin starts afresh, and the run says so.
  auto other =
      run_loom("train " + runs.config() + " --set parallel.nproc=1 --set checkpoint.resume=" + dir +
               "/checkpoints/step-00000005 --run-dir " + (t.path / "one").string());
  CHECK(other.rc == 0);
  CHECK(has(other.out, "state of data plugin 'ema', which this run does not use"));
}

TEST_CASE(
    "a writer with a format of its own is read back through its plugin: resume, verify and "
    "export") {
  LayoutRuns runs(kModel, kTrain);
  Curves full = runs.run("");
  TempDir t;
  const fs::path dir = t.path / "run", ck = dir / "checkpoints";
  const std::string common =
      "--set plugins.ckpt=scramble --set checkpoint.every=5 --run-dir " + dir.string();
  REQUIRE(run_loom("train " + runs.config() + " " + common + " --set train.exit_after=5").rc == 0);
  CHECK(fs::exists(ck / "step-00000005" / "rank-00000.bin.scr"));
  CHECK_FALSE(
      fs::exists(ck / "step-00000005" / "rank-00000.bin"));  // the runtime could not read it itself
  CHECK(has(read_text(ck / "commits.log"), "rank 0 step 5 step-00000005"));
  auto verify = run_loom("ckpt verify " + (ck / "step-00000005").string());
  INFO(verify.out);
  CHECK(verify.rc == 0);
  CHECK(has(verify.out, "read through plugin 'scramble'"));
  auto second =
      run_loom("train " + runs.config() + " " + common + " --set checkpoint.resume=latest");
  INFO(second.out);
  REQUIRE(second.rc == 0);
  check_bitwise(
      full,
      {column(dir / "metrics.jsonl", "loss"), column(dir / "metrics.jsonl", "grad_norm"), {}, {}});
  auto out = run_loom("ckpt export " + (ck / "step-00000010").string() +
                      " --format safetensors --out " + (t.path / "m.safetensors").string());
  CHECK(out.rc == 0);
  CHECK(fs::file_size(t.path / "m.safetensors") > 4 * 1000);
  // Damage a scrambled file: verify names it, through the plugin.
  {
    std::fstream f(ck / "step-00000010" / "rank-00000.bin.scr",
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x01');
  }
  auto bad = run_loom("ckpt verify " + (ck / "step-00000010").string());
  CHECK(bad.rc == 1);
  CHECK(has(bad.out, "checksum mismatch"));
  CHECK(has(bad.out, "(read through plugin 'scramble')"));
}

TEST_CASE(
    "a comm plugin wraps gloo through loom.plugins: dp = 2 matches one rank, counted, placed and "
    "traced") {
  LayoutRuns runs(kModel, kTrain);
  Curves one = runs.run("");
  Curves wrapped =
      runs.run("--set parallel.nproc=2 --set plugins.comm=counting --set run.trace=true");
  check_same(one, wrapped, 1e-5, "dp = 2 over counting(gloo)");
  CHECK(has(wrapped.out, "counting: rank 0 of 2 (host "));
  CHECK(has(wrapped.out, "dp coordinate 1)"));
  CHECK(has(wrapped.out, " collectives over gloo, "));
  CHECK(has(read_text(wrapped.metrics.parent_path() / "trace" / "rank0.json"),
            "\"counting all_reduce\""));
  // The wrapped plugin's own options are checked as if it were selected.
  auto bad = runs.raw(
      "--set parallel.nproc=2 --set plugins.comm=counting --set plugins.counting.inner=glo");
  CHECK(bad.rc != 0);
  CHECK(has(bad.out, "no comm plugin named 'glo'; did you mean 'gloo'?"));
}

TEST_CASE("option rules and a validate hook are checked by config check, with no instance") {
  TempDir t;
  const std::string cfg = t.write("r.toml", "[plugins]\nprecision = \"ruled\"\n");
  auto missing = run_loom("config check " + cfg);
  CHECK(missing.rc == 2);
  CHECK(has(missing.out, "plugin 'ruled' needs [plugins.ruled] label (a name the user must give)"));
  const std::string ok = " --set plugins.ruled.label=x";
  auto range = run_loom("config check " + cfg + ok + " --set plugins.ruled.window=0");
  CHECK(range.rc == 2);
  CHECK(has(range.out, "window: expected"));
  CHECK(has(range.out, "got integer 0"));
  auto choice = run_loom("config check " + cfg + ok + " --set plugins.ruled.mode=avg");
  CHECK(choice.rc == 2);
  CHECK(has(choice.out, "one of \"max\", \"min\", got \"avg\""));
  auto cross = run_loom("config check " + cfg + ok + " --set plugins.ruled.low=2.0");
  CHECK(cross.rc == 2);
  CHECK(has(cross.out, "[plugins.ruled]: low = 2.000000 is above high = 1.000000"));
  CHECK(run_loom("config check " + cfg + ok + " --no-data").rc == 0);
}

TEST_CASE(
    "two plugins with one name: loom plugins shows which wins and why, --json lists the skipped") {
  TempDir t;
  fs::copy_file(LOOM_BINARY_DIR "/lib/loom/plugins/libloom-precision-fp32.so",
                t.path / "libloom-precision-fp32.so");
  const std::string env = "LOOM_PLUGIN_PATH=" + t.path.string() + ":" LOOM_TEST_PLUGIN_DIR;
  auto list = sh(env + " " LOOM_BIN " plugins");
  INFO(list.out);
  CHECK(has(list.out, "shadowed: fp32 in "));
  CHECK(
      has(list.out, (t.path / "libloom-precision-fp32.so").string() +
                        " wins: its directory comes first in the search path (LOOM_PLUGIN_PATH)"));
  auto json = sh(env + " " LOOM_BIN " plugins --json 2>/dev/null");
  CHECK(has(json.out, "\"active\": false, \"shadowed_by\": \"" +
                          (t.path / "libloom-precision-fp32.so").string() + "\""));
  CHECK(has(json.out, "\"skipped\": [\""));  // the test directory's broken libraries
  auto path =
      run_loom("config check " + t.write("p.toml", "[plugins]\npath = [\"/no/such/dir\"]\n"));
  CHECK(
      has(path.out, "warning: [plugins] path entry '/no/such/dir' does not exist; it is skipped"));
}
