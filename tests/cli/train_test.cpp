// `loom data prepare` and `loom train` end to end on a tiny model.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <thread>

#include "support/metrics.hpp"
#include "support/process.hpp"

using loom::test::column;
using loom::test::run_loom;
using loom::test::sh;
using loom::test::TempDir;

namespace {

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// A corpus with structure to learn, a tiny config, and the data prepared for it.
struct TinySetup {
  TempDir t;
  std::string cfg;
  TinySetup() {
    std::string text;
    for (int i = 0; i < 400; ++i)
      text += "the quick brown fox jumps over the lazy dog " + std::to_string(i % 7) + "\n";
    t.write("corpus.txt", text);
    auto prep = run_loom("data prepare --text " + (t.path / "corpus.txt").string() + " --out " +
                         (t.path / "data").string() + " --val-fraction 0.1");
    REQUIRE_MESSAGE(prep.rc == 0, prep.out);
    cfg = t.write("tiny.toml",
                  "[run]\nthreads = 1\npeak_gflops = 50\n[model]\npreset = \"tiny\"\nseq_len = 32\n"
                  "[data]\ndir = \"" +
                      (t.path / "data").string() +
                      "\"\n"
                      "[train]\nsteps = 6\nglobal_batch = 4\nlr = 3e-3\nwarmup_steps = 2\n"
                      "eval_every = 3\neval_batches = 2\nsample_every = 6\nsample_tokens = 20\n");
  }
  std::string run_dir(const std::string& name) const { return (t.path / name).string(); }
};

}  // namespace

TEST_CASE("loom train runs, learns, and writes one metrics line per step") {
  TinySetup s;
  auto r = run_loom("train " + s.cfg + " --run-dir " + s.run_dir("run"));
  REQUIRE_MESSAGE(r.rc == 0, r.out);
  CHECK(has(r.out, "MFU peak 50.0 GFLOP/s from configured"));
  CHECK(has(r.out, "---- sample at step 6 ----"));
  auto metrics = std::filesystem::path(s.run_dir("run")) / "metrics.jsonl";
  auto loss = column(metrics, "loss");
  REQUIRE(loss.size() == 6);
  CHECK(loss.front() == doctest::Approx(std::log(256.0)).epsilon(0.05));
  CHECK(loss.back() < loss.front() - 1.0);
  for (const char* key : {"grad_norm", "lr", "tokens_per_s", "mfu", "step_ms", "mem_bytes"})
    CHECK(column(metrics, key).size() == 6);
  // Step 0: the validation loss before the first update, as llm.c reports it.
  CHECK(column(metrics, "step").size() == 7);
  CHECK(column(metrics, "val_loss").size() == 4);  // steps 0, 1, 3, 6
  CHECK(has(r.out, "(before the first update)"));
  CHECK(column(metrics, "val_loss").front() == doctest::Approx(std::log(256.0)).epsilon(0.05));
  CHECK(std::filesystem::exists(std::filesystem::path(s.run_dir("run")) / "config.toml"));
}

TEST_CASE("gradient accumulation gives the same steps as one big micro-batch") {
  TinySetup s;
  auto whole =
      run_loom("train " + s.cfg + " --run-dir " + s.run_dir("a") + " --set train.micro_batch=4");
  auto split =
      run_loom("train " + s.cfg + " --run-dir " + s.run_dir("b") + " --set train.micro_batch=1");
  REQUIRE(whole.rc == 0);
  REQUIRE(split.rc == 0);
  auto la = column(std::filesystem::path(s.run_dir("a")) / "metrics.jsonl", "loss");
  auto lb = column(std::filesystem::path(s.run_dir("b")) / "metrics.jsonl", "loss");
  auto ga = column(std::filesystem::path(s.run_dir("a")) / "metrics.jsonl", "grad_norm");
  auto gb = column(std::filesystem::path(s.run_dir("b")) / "metrics.jsonl", "grad_norm");
  REQUIRE(la.size() == lb.size());
  for (size_t i = 0; i < la.size(); ++i) {
    CHECK(lb[i] == doctest::Approx(la[i]).epsilon(1e-5));
    CHECK(gb[i] == doctest::Approx(ga[i]).epsilon(1e-4));
  }
}

TEST_CASE("training failures reach the user with the right exit code") {
  TinySetup s;
  auto throws = run_loom("train " + s.cfg + " --set plugins.precision=throws");
  CHECK(throws.rc == 2);  // the plugin rejected its configuration
  CHECK(
      has(throws.out,
          "plugin 'throws' failed to start: bad config: the flux capacitor needs 1.21 gigawatts"));
  auto declines = run_loom("train " + s.cfg + " --set plugins.precision=declines");
  CHECK(declines.rc == 1);
  CHECK(has(declines.out, "cannot run here: needs a device this machine does not have"));
  auto no_data = run_loom("train " + s.cfg + " --set data.dir=/nonexistent");
  CHECK(no_data.rc == 2);  // bad input, refused before anything starts
  CHECK(has(no_data.out,
            "[data] dir = \"/nonexistent\" does not exist; make it with: loom data prepare"));
  auto bad_batch = run_loom("train " + s.cfg + " --set train.micro_batch=3");
  CHECK(bad_batch.rc == 2);
  CHECK(has(
      bad_batch.out,
      "global_batch = 4 over dp = 1 is 4 sequences per rank, not a multiple of micro_batch = 3"));
  auto heads = run_loom("train " + s.cfg + " --set model.n_head=3");
  CHECK(heads.rc == 2);
  CHECK(has(heads.out, "d_model = 64 is not divisible by n_head = 3"));
  auto preset = run_loom("train " + s.cfg + " --set model.preset=smal");
  CHECK(preset.rc == 2);
  CHECK(has(preset.out, "did you mean 'small'?"));
}

TEST_CASE("launcher variables are parsed strictly and range-checked, naming the variable") {
  TinySetup s;
  const std::string run = "train " + s.cfg + " --run-dir " + s.run_dir("env");
  struct Case {
    const char* env;
    const char* says;
  };
  for (Case c :
       {Case{"RANK=0 WORLD_SIZE=0", "WORLD_SIZE = 0 (at least 1)"},
        Case{"RANK=0 WORLD_SIZE=abc", "launcher variable WORLD_SIZE = \"abc\" is not an integer"},
        Case{"RANK=abc WORLD_SIZE=2", "launcher variable RANK = \"abc\" is not an integer"},
        Case{"RANK=5 WORLD_SIZE=2", "RANK = 5 is not in [0, WORLD_SIZE = 2)"},
        Case{"SLURM_PROCID=0 SLURM_NTASKS=0", "SLURM_NTASKS = 0 (at least 1)"},
        Case{"OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=0",
             "OMPI_COMM_WORLD_SIZE = 0 (at least 1)"},
        Case{"RANK=0 WORLD_SIZE=1 MASTER_PORT=70000", "MASTER_PORT = 70000 (1-65535)"}}) {
    auto r = run_loom(run, c.env);
    INFO(std::string(c.env) << "\n" << r.out);
    CHECK(r.rc == 2);
    CHECK(r.out.find(c.says) != std::string::npos);
  }
}

TEST_CASE(
    "NaN, infinities and betas of 1 are refused, and so are an empty config and a directory") {
  TinySetup s;
  const std::string run = "train " + s.cfg + " --run-dir " + s.run_dir("bad") + " --set ";
  struct Case {
    const char* set;
    const char* says;
  };
  for (Case c :
       {Case{"train.lr=nan",
             "[train] lr: expected a finite float in [0, 10], got floating-point nan"},
        Case{"model.init_std=nan", "[model] init_std: expected a finite float"},
        Case{"train.min_lr_ratio=nan",
             "[train] min_lr_ratio: expected a finite float in [0, 1], got floating-point nan"},
        Case{"train.lr=inf", "expected a finite float in [0, 10], got floating-point inf"},
        Case{"train.beta1=1.0", "[train] beta1: expected float in [0, 1), got floating-point 1.0"},
        Case{"train.beta2=1.0",
             "[train] beta2: expected float in [0, 1), got floating-point 1.0"}}) {
    auto r = run_loom(run + c.set);
    INFO(std::string(c.set) << "\n" << r.out);
    CHECK(r.rc == 2);
    CHECK(r.out.find(c.says) != std::string::npos);
  }
  auto empty =
      run_loom("train " + s.t.write("empty.toml", "\n  \n") + " --run-dir " + s.run_dir("e"));
  CHECK(empty.rc == 2);
  CHECK(empty.out.find("empty.toml' is empty: nothing says what to train") != std::string::npos);
  auto comments = run_loom("train " + s.t.write("comments.toml", "# a config that says nothing\n") +
                           " --run-dir " + s.run_dir("c"));
  CHECK(comments.rc == 2);
  CHECK(comments.out.find("comments.toml' holds only comments: nothing says what to train") !=
        std::string::npos);
  auto dir = run_loom("config check " + s.t.path.string());
  CHECK(dir.rc == 2);
  CHECK(dir.out.find("is a directory, not a TOML file") != std::string::npos);
}

TEST_CASE("resuming at the last step says there is nothing to do and leaves the run as it was") {
  TinySetup s;
  const std::string ck = s.run_dir("ck");
  const std::string run = "train " + s.cfg + " --run-dir " + s.run_dir("r") +
                          " --set plugins.ckpt=sync --set checkpoint.dir=" + ck;
  REQUIRE(run_loom(run + " --set checkpoint.every=6").rc == 0);
  const auto before = column(std::filesystem::path(s.run_dir("r")) / "metrics.jsonl", "loss");
  auto again = run_loom(run + " --set checkpoint.every=6 --set checkpoint.resume=latest");
  INFO(again.out);
  CHECK(again.rc == 0);
  CHECK(
      again.out.find("nothing to do: the checkpoint has step 6 done and the run ends at step 6") !=
      std::string::npos);
  CHECK(again.out.find("done:") == std::string::npos);
  CHECK(column(std::filesystem::path(s.run_dir("r")) / "metrics.jsonl", "loss") == before);
}

TEST_CASE("a second job on a run directory in use is refused, naming the holder's pid and host") {
  TinySetup s;
  const std::string dir = s.run_dir("shared");
  // The first job: long enough to still be running when the second starts.
  auto first = loom::test::sh(
      "(LOOM_PLUGIN_PATH=" LOOM_TEST_PLUGIN_DIR " " LOOM_BIN " train " + s.cfg + " --run-dir " +
      dir + " --set train.steps=100000 --set train.sample_every=0 > /dev/null 2>&1 & echo $!)");
  const std::string pid = first.out.substr(0, first.out.find('\n'));
  for (int i = 0; i < 100 && !std::filesystem::exists(std::filesystem::path(dir) / "metrics.jsonl");
       ++i)
    loom::test::sh("sleep 0.1");
  auto second = run_loom("train " + s.cfg + " --run-dir " + dir);
  loom::test::sh("kill " + pid);
  INFO(second.out);
  CHECK(second.rc == 2);
  CHECK(second.out.find("run directory '" + dir + "' is in use by another job (pid and host: " +
                        pid + " ") != std::string::npos);
  // Two ranks under the local launcher share its lock.
  loom::test::sh("sleep 0.5");
  auto two = run_loom("train " + s.cfg + " --run-dir " + dir +
                      " --set parallel.nproc=2 --set train.sample_every=0 "
                      "--set checkpoint.resume=auto");
  INFO(two.out);
  CHECK(two.rc == 0);
}

TEST_CASE(
    "resuming a checkpoint of another model is refused naming the keys, even when every shape "
    "agrees") {
  TinySetup s;
  const std::string ck = s.run_dir("ck2");
  const std::string run = "train " + s.cfg + " --run-dir " + s.run_dir("r2") +
                          " --set plugins.ckpt=sync --set checkpoint.dir=" + ck;
  REQUIRE(run_loom(run + " --set checkpoint.every=3 --set train.exit_after=3 --set model.n_head=4")
              .rc == 0);
  auto other = run_loom(
      run + " --set checkpoint.every=3 --set checkpoint.resume=latest --set model.n_head=2");
  INFO(other.out);
  CHECK(other.rc == 2);
  CHECK(other.out.find("holds another model ([model] n_head = 4 there, 2 here") !=
        std::string::npos);
  auto same = run_loom(
      run + " --set checkpoint.every=3 --set checkpoint.resume=latest --set model.n_head=4");
  CHECK(same.rc == 0);
}

TEST_CASE(
    "a full disk under the run directory fails the run naming the file, and an unwritable "
    "checkpoint directory is found before step 1") {
  TinySetup s;
  const std::filesystem::path dir = s.run_dir("full");
  std::filesystem::create_directories(dir);
  std::filesystem::create_symlink("/dev/full", dir / "metrics.jsonl");  // every write: ENOSPC
  auto full = run_loom("train " + s.cfg + " --run-dir " + dir.string());
  INFO(full.out);
  CHECK(full.rc == 1);
  CHECK(full.out.find("writing '" + (dir / "metrics.jsonl").string() +
                      "' failed: No space left on device") != std::string::npos);
  CHECK(full.out.find("done:") == std::string::npos);
  auto ckpt = run_loom(
      "train " + s.cfg + " --run-dir " + s.run_dir("ro") +
      " --set plugins.ckpt=sync --set checkpoint.every=3 --set checkpoint.dir=/proc/loom-ckpt");
  INFO(ckpt.out);
  CHECK(ckpt.rc == 1);
  CHECK(ckpt.out.find("checkpoint directory '/proc/loom-ckpt' cannot be written") !=
        std::string::npos);
  CHECK(ckpt.out.find("step     1") == std::string::npos);
}

TEST_CASE(
    "a checkpoint writer that writes nothing is caught before commit, and latest stays on the "
    "previous checkpoint") {
  TinySetup s;
  const std::string ck = s.run_dir("ck3");
  const std::string run = "train " + s.cfg + " --run-dir " + s.run_dir("r3") +
                          " --set checkpoint.every=3 --set checkpoint.dir=" + ck;
  REQUIRE(run_loom(run + " --set plugins.ckpt=sync --set train.exit_after=3").rc == 0);
  auto bad =
      run_loom(run + " --set checkpoint.resume=latest --set plugins.ckpt=" LOOM_TEST_PLUGIN_DIR
                     "/libloom-precision-nowrite.so");
  INFO(bad.out);
  CHECK(bad.rc == 1);
  CHECK(bad.out.find("step-00000006: the writer did not write rank-00000.bin") !=
        std::string::npos);
  std::ifstream latest(std::filesystem::path(ck) / "latest");
  std::string name;
  latest >> name;
  CHECK(name == "step-00000003");
  CHECK(!std::filesystem::exists(std::filesystem::path(ck) / "step-00000006"));
  // One that writes the right number of zeros is caught by the checksums it is read back against.
  auto zeros =
      run_loom(run + " --set checkpoint.resume=latest --set plugins.ckpt=" LOOM_TEST_PLUGIN_DIR
                     "/libloom-precision-zeros.so");
  INFO(zeros.out);
  CHECK(zeros.rc == 1);
  CHECK(zeros.out.find("step-00000006: rank-00000.bin: read back, its crc32c is ") !=
        std::string::npos);
  CHECK(zeros.out.find("not committed, the previous checkpoint and `latest` are kept") !=
        std::string::npos);
  std::ifstream still(std::filesystem::path(ck) / "latest");
  still >> name;
  CHECK(name == "step-00000003");
}

TEST_CASE(
    "the run directory and the checkpoint manifest record each plugin's library, version and ABI") {
  TinySetup s;
  const std::string ck = s.run_dir("ck4");
  REQUIRE(run_loom("train " + s.cfg + " --run-dir " + s.run_dir("r4") +
                   " --set plugins.ckpt=sync --set checkpoint.every=6 --set checkpoint.dir=" + ck)
              .rc == 0);
  std::ifstream rec(std::filesystem::path(s.run_dir("r4")) / "plugins.json");
  const std::string run((std::istreambuf_iterator<char>(rec)), {});
  CHECK(run.find("\"slot\": \"precision\", \"name\": \"fp32\", \"version\": \"1.0.0\", \"abi\": "
                 "\"3.0\", \"library\": \"") != std::string::npos);
  CHECK(run.find("libloom-precision-fp32.so\"") != std::string::npos);
  std::ifstream man(std::filesystem::path(ck) / "step-00000006" / "manifest.json");
  const std::string m((std::istreambuf_iterator<char>(man)), {});
  CHECK(m.find("\"plugins\"") != std::string::npos);
  CHECK(m.find("libloom-ckpt-sync.so") != std::string::npos);
}

TEST_CASE(
    "resume = latest names what is wrong: no checkpoint directory, no latest, an empty latest, a "
    "latest naming nothing") {
  TinySetup s;
  const std::filesystem::path ck = s.run_dir("ck5");
  // Without saving (checkpoint.every = 0), so nothing creates the directory first.
  const std::string run = "train " + s.cfg + " --run-dir " + s.run_dir("r5") +
                          " --set checkpoint.resume=latest" +
                          " --set checkpoint.dir=" + ck.string();
  auto says = [&](const std::string& what) {
    auto r = run_loom(run);
    INFO(r.out);
    CHECK(r.rc == 1);
    CHECK(r.out.find(what) != std::string::npos);
  };
  says("the checkpoint directory " + ck.string() + " does not exist");
  std::filesystem::create_directories(ck);
  says((ck / "latest").string() + " does not exist (no checkpoint was committed there)");
  s.t.write("ck5/latest", "\n");
  says((ck / "latest").string() + " is empty: it names no checkpoint");
  s.t.write("ck5/latest", "step-00000042\n");
  says("names step-00000042, which is not in " + ck.string());
}

TEST_CASE("beside busy processes a one-rank run trains on the cores left, with the same numbers") {
  if (std::thread::hardware_concurrency() < 2) return;  // one core: nothing to give back
  TempDir t;
  std::string text;
  for (int i = 0; i < 300; ++i)
    text += "two spinning shells share the cores with this run, line " + std::to_string(i) + "\n";
  t.write("c.txt", text);
  REQUIRE(run_loom("data prepare --text " + (t.path / "c.txt").string() + " --out " +
                   (t.path / "d").string())
              .rc == 0);
  const std::string cfg =
      t.write("f.toml", "[run]\npeak_gflops = 10\n[model]\npreset = \"tiny\"\n[data]\ndir = \"" +
                            (t.path / "d").string() +
                            "\"\n[train]\nsteps = 30\nglobal_batch = 4\neval_every = 0\n");
  // As many spinning shells as cores: whatever else runs, the run sees other processes' load.
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  std::string pids;
  for (int i = 0; i < cores; ++i) {
    std::string pid = sh("sh -c 'while :; do :; done' > /dev/null 2>&1 & echo $!").out;
    while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' '))
      pid.pop_back();  // one line for kill
    pids += " " + pid;
  }
  auto adaptive = run_loom("train " + cfg + " --run-dir " + (t.path / "a").string());
  sh("kill" + pids);
  INFO(adaptive.out);
  REQUIRE(adaptive.rc == 0);
  CHECK(has(adaptive.out, "threads: " + std::to_string(cores) + " -> "));
  const std::vector<double> threads = column(t.path / "a" / "metrics.jsonl", "threads");
  CHECK(threads.front() == cores);
  // Some steps ran on fewer cores. Not necessarily the last: each look reads a window of 10 ms
  // ticks, and a spinning shell the scheduler parked for a while reads as a free core.
  REQUIRE(!threads.empty());
  CHECK(*std::min_element(threads.begin(), threads.end()) < cores);
  // The kernels' results do not depend on the thread count: the same losses as one thread.
  auto one =
      run_loom("train " + cfg + " --run-dir " + (t.path / "b").string() + " --set run.threads=1");
  REQUIRE(one.rc == 0);
  CHECK(column(t.path / "a" / "metrics.jsonl", "loss") ==
        column(t.path / "b" / "metrics.jsonl", "loss"));
}

TEST_CASE("data prepare refuses a validation share that is not a number from 0 up to 1") {
  TempDir t;
  t.write("c.txt", "a few words of text\n");
  for (const char* bad : {"nan", "1", "-0.5"}) {
    auto r = run_loom(std::string("data prepare --val-fraction ") + bad + " --text " +
                      (t.path / "c.txt").string() + " --out " + (t.path / "d").string());
    INFO(bad << ": " << r.out);
    CHECK(r.rc == 2);
    CHECK(has(r.out, "--val-fraction must be in [0, 1)"));
  }
}

// bf16's GEMMs on the CPU's own instructions, or widened to fp32 where there are none: said once
// at start-up, and the two trace the same losses (the same operand values; the sums' order
// differs) from the same activations, stored in 16 bits either way.
// ONEDNN_MAX_CPU_ISA caps what oneDNN uses, as a CPU without AMX would.
TEST_CASE("bf16 says at start-up whether the CPU multiplies bf16, and its emulation trains alike") {
  TinySetup s;
  const std::string bf16 = " --set plugins.precision=bf16 --set run.threads=2";
  auto native = run_loom("train " + s.cfg + " --run-dir " + s.run_dir("native") + bf16);
  REQUIRE_MESSAGE(native.rc == 0, native.out);
  auto emulated = run_loom("train " + s.cfg + " --run-dir " + s.run_dir("emulated") + bf16,
                           "ONEDNN_MAX_CPU_ISA=AVX2");
  REQUIRE_MESSAGE(emulated.rc == 0, emulated.out);
  const std::string emulation = "precision: this device has no bf16 GEMM instructions";
  CHECK(has(emulated.out, emulation));
  // Without the instructions bf16 still keeps its memory: operands stored in 16 bits, widened.
  CHECK(has(emulated.out, "stored in 16 bits (half the memory) and widened to fp32"));
  CHECK(has(emulated.out, "MFU peak 50.0 GFLOP/s"));  // a configured peak stays as configured
  // This machine's own answer: AMX where the CPU has it.
  const bool instructions = has(native.out, "precision: bf16 GEMM operands stored in 16 bits");
  CHECK(instructions != has(native.out, emulation));
  MESSAGE("bf16 here: " << (instructions ? "the CPU's instructions" : "emulated"));
  const auto a = column(std::filesystem::path(s.run_dir("native")) / "metrics.jsonl", "loss");
  const auto b = column(std::filesystem::path(s.run_dir("emulated")) / "metrics.jsonl", "loss");
  REQUIRE(a.size() == 6);
  REQUIRE(b.size() == 6);
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == doctest::Approx(b[i]).epsilon(1e-3));
  // fp32 says nothing about bf16, and holds more activations than either bf16 run.
  auto fp32 = run_loom("train " + s.cfg + " --run-dir " + s.run_dir("fp32"));
  REQUIRE(fp32.rc == 0);
  CHECK_FALSE(has(fp32.out, "precision: "));
  const auto peak = [&s](const char* run) {
    return column(std::filesystem::path(s.run_dir(run)) / "metrics.jsonl", "activation_peak_bytes")
        .back();
  };
  INFO("activation peaks: fp32 " << peak("fp32") << ", bf16 " << peak("native") << ", bf16 widened "
                                 << peak("emulated"));
  CHECK(peak("emulated") < peak("fp32"));
  CHECK(peak("native") == peak("emulated"));
}
