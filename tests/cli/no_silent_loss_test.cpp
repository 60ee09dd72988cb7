// What the fault battery found written over, cut short or left half-done without a word: each
// is now refused, kept, or an error that says why (docs/checkpoints.md, docs/training.md).
#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <thread>
#include <utility>
#include <vector>

#include "support/process.hpp"

using loom::test::read_text;
using loom::test::run_loom;
using loom::test::sh;
using loom::test::TempDir;
namespace fs = std::filesystem;

namespace {

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A tiny model over a prepared corpus; runs save every 2 steps with the sync writer.
struct Job {
  TempDir t;
  std::string cfg;
  Job() {
    std::string text;
    for (int i = 0; i < 200; ++i)
      text += "nothing a run wrote is lost without a word, line " + std::to_string(i % 9) + "\n";
    t.write("c.txt", text);
    REQUIRE(run_loom("data prepare --val-fraction 0 --text " + (t.path / "c.txt").string() +
                     " --out " + (t.path / "d").string())
                .rc == 0);
    cfg = t.write("j.toml",
                  "[run]\nthreads = 1\npeak_gflops = 10\n[model]\npreset = \"tiny\"\nseq_len = "
                  "16\n[data]\ndir = \"" +
                      (t.path / "d").string() +
                      "\"\n[train]\nsteps = 4\nglobal_batch = 2\neval_every = 0\n"
                      "[checkpoint]\nevery = 2\n[plugins]\nckpt = \"sync\"\n");
  }
  loom::test::Result train(const std::string& run, const std::string& extra = "") const {
    return run_loom("train " + cfg + " --run-dir " + (t.path / run).string() + " " + extra);
  }
  fs::path at(const std::string& p) const { return t.path / p; }
};

// A tmpfs of `bytes` mounted at `dir` for the test's lifetime: a full disk on demand.
struct SmallDisk {
  fs::path dir;
  SmallDisk(fs::path d, int bytes) : dir(std::move(d)) {
    fs::create_directories(dir);
    auto m =
        sh("mount -t tmpfs -o size=" + std::to_string(bytes) + " loom-test-full " + dir.string());
    INFO("mounting a small tmpfs needs root: " << m.out);
    REQUIRE(m.rc == 0);
  }
  ~SmallDisk() { sh("umount -l " + dir.string()); }
};

}  // namespace

TEST_CASE(
    "a fresh run where an earlier run left metrics or checkpoints is refused, and resume = auto "
    "continues it") {
  Job j;
  REQUIRE(j.train("a").rc == 0);
  const std::string metrics = read_text(j.at("a/metrics.jsonl")),
                    latest = read_text(j.at("a/checkpoints/latest"));
  auto again = j.train("a");
  INFO(again.out);
  CHECK(again.rc == 2);
  CHECK(has(again.out, "run directory '" + j.at("a").string() +
                           "' holds an earlier run's metrics.jsonl and checkpoints "
                           "(latest: step-00000004)"));
  CHECK(has(again.out, "--set checkpoint.resume=auto"));
  CHECK(read_text(j.at("a/metrics.jsonl")) == metrics);  // nothing was truncated
  auto more = j.train("a", "--set checkpoint.resume=auto --set train.steps=6");
  CHECK(more.rc == 0);
  CHECK(has(read_text(j.at("a/metrics.jsonl")), metrics));  // appended to, not replaced
  CHECK(read_text(j.at("a/checkpoints/latest")) == "step-00000006\n");
}

TEST_CASE(
    "two jobs with one checkpoint directory: the second is refused, at once or one after the "
    "other") {
  Job j;
  const std::string shared = "--set checkpoint.dir=" + j.at("ck").string();
  REQUIRE(j.train("a", shared).rc == 0);
  auto after = j.train("b", shared);
  INFO(after.out);
  CHECK(after.rc == 2);
  CHECK(has(after.out, "[checkpoint] dir '" + j.at("ck").string() +
                           "' holds checkpoints (latest: step-00000004)"));
  CHECK(read_text(j.at("ck/latest")) == "step-00000004\n");

  // While job c saves there, job d is refused naming c.
  const std::string log = j.at("c.log").string();
  auto c = sh("(LOOM_PLUGIN_PATH=" LOOM_TEST_PLUGIN_DIR " " LOOM_BIN " train " + j.cfg +
              " --run-dir " + j.at("c").string() + " --set checkpoint.dir=" + j.at("ck2").string() +
              " --set train.steps=100000 > " + log + " 2>&1 & echo $!)");
  const std::string pid = c.out.substr(0, c.out.find('\n'));
  for (int i = 0; i < 200 && !has(read_text(log), "step "); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  auto during = j.train("d", "--set checkpoint.dir=" + j.at("ck2").string());
  sh("kill " + pid + "; while kill -0 " + pid + " 2>/dev/null; do sleep 0.1; done");
  INFO(during.out);
  CHECK(during.rc == 2);
  CHECK(has(during.out, "checkpoint directory '" + j.at("ck2").string() +
                            "' is in use by another job (pid and host: " + pid));
}

TEST_CASE("ckpt import into a root that holds checkpoints is refused, so latest keeps its step") {
  Job j;
  REQUIRE(j.train("a").rc == 0);
  REQUIRE(run_loom("ckpt export " + j.at("a/checkpoints").string() + " --format hf --out " +
                   j.at("hf").string())
              .rc == 0);
  auto into =
      run_loom("ckpt import " + j.at("hf").string() + " --out " + j.at("a/checkpoints").string());
  INFO(into.out);
  CHECK(into.rc == 2);
  CHECK(has(into.out, "already holds checkpoints (latest: step-00000004)"));
  CHECK(read_text(j.at("a/checkpoints/latest")) == "step-00000004\n");
  CHECK(run_loom("ckpt import " + j.at("hf").string() + " --out " + j.at("fresh").string()).rc ==
        0);
}

TEST_CASE(
    "a full disk fails the trace, the compare report and an export with the reason, and leaves no "
    "partial file") {
  Job j;
  SmallDisk trace(j.at("r/trace"),
                  4096);  // the trace of 30 steps needs more than a page (about 14 KiB)
  auto traced = j.train("r", "--set run.trace=true --set train.steps=30 --set checkpoint.every=0");
  INFO(traced.out);
  CHECK(traced.rc == 1);
  CHECK(has(traced.out, "cannot write trace '" + (trace.dir / "rank0.json").string() +
                            "': No space left on device ("));
  CHECK(fs::is_empty(trace.dir));

  REQUIRE(j.train("b").rc == 0);
  SmallDisk report(j.at("cmp"), 4096);
  auto compared = run_loom("compare --from-runs " + j.at("b").string() + " " + j.at("b").string() +
                           " --out " + report.dir.string());
  INFO(compared.out);
  CHECK(compared.rc == 1);
  CHECK(has(compared.out, "cannot write the report '" + (report.dir / "report.html").string() +
                              "': No space left on device"));
  CHECK(fs::is_empty(report.dir));

  SmallDisk out(j.at("exp"), 16384);
  auto exported = run_loom("ckpt export " + j.at("b").string() + " --out " +
                           (out.dir / "m.safetensors").string());
  INFO(exported.out);
  CHECK(exported.rc == 1);
  CHECK(has(exported.out, "cannot write safetensors file '" + (out.dir / "m.safetensors").string() +
                              "': No space left on device"));
  CHECK(fs::is_empty(out.dir));
}

TEST_CASE(
    "a metrics.jsonl that is a directory, or a run directory that is not there, is named as such") {
  Job j;
  fs::create_directories(j.at("odd/metrics.jsonl"));
  auto doctor = run_loom("doctor " + j.at("odd").string());
  CHECK(doctor.rc == 1);
  CHECK(has(doctor.out, "cannot read metrics file '" + j.at("odd/metrics.jsonl").string() +
                            "': it is a directory"));
  auto compare =
      run_loom("compare --from-runs " + j.at("odd").string() + " " + j.at("nowhere").string());
  CHECK(compare.rc == 1);
  CHECK(has(compare.out, "cannot read metrics file"));
  auto missing = run_loom("doctor " + j.at("nowhere").string());
  CHECK(has(missing.out, "run directory '" + j.at("nowhere").string() + "' does not exist"));
  auto no_ckpt = run_loom("ckpt verify " + j.at("nowhere").string());
  CHECK(has(no_ckpt.out, "checkpoint '" + j.at("nowhere").string() + "' does not exist"));
}

TEST_CASE(
    "generate takes a run directory, and the demo's config leaves a checkpoint to generate from") {
  Job j;
  REQUIRE(j.train("a").rc == 0);
  auto g = run_loom("generate " + j.at("a").string() + " --max-tokens 5 --prompt 'nothing'");
  INFO(g.out);
  CHECK(g.rc == 0);
  REQUIRE(j.train("b", "--set checkpoint.every=0").rc == 0);
  auto none = run_loom("generate " + j.at("b").string() + " --max-tokens 5");
  CHECK(none.rc == 1);
  CHECK(has(none.out,
            "run directory '" + j.at("b").string() + "' holds no checkpoint in checkpoints/"));
  const std::string demo = read_text(LOOM_SOURCE_DIR "/configs/demo.toml");
  CHECK(has(demo, "[checkpoint]\nevery = 600"));
  CHECK(has(demo, "ckpt = \"sync\""));
  CHECK(has(demo, "tensorboard = true"));  // the demo's curves open in TensorBoard
}

TEST_CASE(
    "[checkpoint] every without a writer is refused by config check as by train, naming the line "
    "and every writer on the plugin path") {
  Job j;
  const std::string cfg = j.t.write(
      "w.toml", read_text(j.cfg).substr(0, read_text(j.cfg).find("[plugins]")));  // no ckpt
  const std::string at = cfg + ":14:9: [checkpoint] every = 2 needs a checkpoint writer";
  // A third-party writer (the scramble example) is offered beside the built-ins.
  const std::string path = "LOOM_PLUGIN_PATH=" LOOM_TEST_PLUGIN_DIR " ";
  for (const std::string& command :
       {"config check --no-data " + cfg, "train " + cfg + " --run-dir " + j.at("r").string()}) {
    auto r = sh(path + LOOM_BIN " " + command + " 2>&1");
    INFO(command << "\n" << r.out);
    CHECK(r.rc == 2);
    CHECK(has(r.out, at));
    CHECK(has(r.out, "\"async\""));
    CHECK(has(r.out, "\"sync\""));
    CHECK(has(r.out, "\"scramble\""));
    CHECK(has(r.out, "`loom plugins` lists every writer on the plugin path"));
  }
  CHECK_FALSE(fs::exists(j.at("r") / "metrics.jsonl"));
  auto off = run_loom("config check --no-data " + cfg + " --set checkpoint.every=0");
  CHECK(off.rc == 0);
  auto show = run_loom("config show " + cfg);  // the config to fix is shown as it is
  CHECK(show.rc == 0);
  CHECK(has(show.out, "every = 2"));
}

TEST_CASE("odd command-line values are refused naming the option and its range") {
  Job j;
  REQUIRE(j.train("a").rc == 0);
  const std::string runs = j.at("a").string() + " " + j.at("a").string();
  for (const auto& [args, says] : std::vector<std::pair<std::string, std::string>>{
           {"compare --from-runs " + runs + " --rounds 0",
            "--rounds must be a number from 1 to 1000, got 0"},
           {"compare --from-runs " + runs + " --effect -0.5",
            "--effect must be a number from 0.0001 to 10, got -0.5"},
           {"compare --from-runs " + runs + " --min-effect nan",
            "--min-effect must be a number from 0 to 10, got nan"},
           {"generate " + j.at("a").string() + " --max-tokens -5",
            "--max-tokens must be a number from 1 to 1000000, got -5"},
           {"generate " + j.at("a").string() + " --top-k -3",
            "--top-k must be a number from 0 to 1073741824, got -3"},
           {"bench comm --iters 0", "--iters must be a number from 1 to 1000000, got 0"}}) {
    auto r = run_loom(args);
    INFO(args << "\n" << r.out);
    CHECK(r.rc == 2);
    CHECK(has(r.out, says));
  }
  SUBCASE("a warmup as long as the runs leaves nothing to time") {
    auto r = run_loom("compare --from-runs " + j.at("a").string() + "," + j.at("a").string() + " " +
                      j.at("a").string() + "," + j.at("a").string() + " --warmup 4");
    CHECK(r.rc == 2);
    CHECK(
        has(r.out, "--warmup 4 leaves none of the 4 steps of " + j.at("a").string() + " to time"));
  }
  SUBCASE("a single round says that it proves nothing about speed") {
    auto r = run_loom("compare --from-runs " + runs + " --out " + j.at("cmp").string());
    CHECK(has(r.out, "one run of each side: its step times are one sample"));
  }
  SUBCASE("a pipeline plugin at pp = 1 is noted") {
    auto r = run_loom("config check " + j.cfg + " --set plugins.pipeline=1f1b");
    CHECK(r.rc == 0);
    CHECK(has(r.out, "note: [plugins] pipeline = \"1f1b\" does nothing at [parallel] pp = 1"));
  }
}
