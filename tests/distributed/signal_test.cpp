// Preemption: SIGTERM or SIGINT stops a run after a whole step, saves a checkpoint when
// checkpointing is on, and exits 3; the run then resumes from that step.
#include <doctest/doctest.h>

#include <chrono>
#include <thread>

#include "support/metrics.hpp"
#include "support/process.hpp"

using namespace loom::test;

namespace {

bool has(const std::string& s, const std::string& what) {
  return s.find(what) != std::string::npos;
}

struct SignalRun {
  TempDir t;
  std::string cfg;
  SignalRun(const std::string& on_signal, int every) {
    std::string text;
    for (int i = 0; i < 300; ++i)
      text += "a preempted run saves its step and resumes, line " + std::to_string(i) + "\n";
    t.write("c.txt", text);
    REQUIRE(run_loom("data prepare --text " + (t.path / "c.txt").string() + " --out " +
                     (t.path / "d").string())
                .rc == 0);
    cfg = t.write("f.toml",
                  "[run]\nthreads = 1\npeak_gflops = 10\n[model]\npreset = \"tiny\"\n"
                  "[data]\ndir = \"" +
                      (t.path / "d").string() +
                      "\"\n"
                      "[train]\nsteps = 100000\nglobal_batch = 4\neval_every = 0\n"
                      "[plugins]\nckpt = \"sync\"\n"
                      "[checkpoint]\nevery = " +
                      std::to_string(every) + "\non_signal = \"" + on_signal + "\"\n");
  }
  std::string log() const { return sh("cat " + (t.path / "log").string()).out; }
  // Starts `loom train` in the background, waits for its first steps, sends `sig` to that process
  // (the local launcher when it spawns ranks), and returns the exit status.
  // `one_rank`: the signal goes to the launcher's last rank instead, as a scheduler that
  // preempts one process would send it.
  int train_and_signal(const std::string& args, const std::string& sig, bool one_rank = false) {
    const std::string rc = (t.path / "rc").string(), pid = (t.path / "pid").string();
    sh("( LOOM_PLUGIN_PATH=" LOOM_TEST_PLUGIN_DIR " " LOOM_BIN " train " + cfg + " --run-dir " +
       (t.path / "run").string() + " " + args + " > " + (t.path / "log").string() +
       " 2>&1 & echo $! > " + pid + "; wait $!; echo $? > " + rc + " ) > /dev/null 2>&1 &");
    for (int i = 0; i < 300 && !has(log(), "step    20/"); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    REQUIRE(has(log(), "step    20/"));
    sh("kill -" + sig + " " +
       (one_rank ? "$(pgrep -P $(cat " + pid + ") | tail -n 1)" : "$(cat " + pid + ")"));
    auto status = [&] { return sh("test -s " + rc + " && cat " + rc).out; };
    for (int i = 0; i < 300 && status().empty(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    REQUIRE(!status().empty());
    return std::stoi(status());
  }
};

}  // namespace

TEST_CASE(
    "SIGTERM stops a single-rank run after a whole step, saves it, exits 3, and the run resumes "
    "after it") {
  SignalRun r("save", 100000);
  // resume = auto: the first submission finds no checkpoint and starts fresh.
  const int rc = r.train_and_signal("--set checkpoint.resume=auto", "TERM");
  INFO(r.log());
  CHECK(rc == 3);
  CHECK(has(r.log(), "resume = \"auto\": no checkpoint in "));
  CHECK(has(r.log(), "stopped by SIGTERM after step "));
  CHECK(has(r.log(), "its checkpoint is saved"));
  // The saved step is the last one logged: nothing trained after it is lost.
  const std::vector<double> steps = column(r.t.path / "run" / "metrics.jsonl", "step");
  REQUIRE(!steps.empty());
  const long long last = static_cast<long long>(steps.back());
  char name[32];
  std::snprintf(name, sizeof name, "step-%08lld", last);
  CHECK(sh("cat " + (r.t.path / "run" / "checkpoints" / "latest").string()).out.find(name) !=
        std::string::npos);
  auto resumed =
      run_loom("train " + r.cfg + " --run-dir " + (r.t.path / "run").string() +
               " --set checkpoint.resume=auto --set train.steps=" + std::to_string(last + 2));
  INFO(resumed.out);
  CHECK(resumed.rc == 0);
  CHECK(has(resumed.out, "resum"));
  CHECK(has(resumed.out, "/" + std::to_string(last + 2) + " | loss"));
  CHECK(column(r.t.path / "run" / "metrics.jsonl", "step").back() == last + 2);
}

TEST_CASE(
    "SIGINT to the local launcher stops every rank after the same step, exits 3, and on_signal = "
    "exit saves nothing") {
  SignalRun r("exit", 100000);
  // Only the launcher gets the signal: it forwards SIGTERM, and the ranks agree on the step.
  const int rc = r.train_and_signal("--set parallel.nproc=2", "INT");
  INFO(r.log());
  CHECK(rc == 3);
  CHECK(has(r.log(), "[rank 0] stopped by SIGTERM after step "));
  CHECK(has(r.log(), "nothing saved ([checkpoint] on_signal = \"exit\")"));
  CHECK_FALSE(has(r.log(), "signal 15"));
  CHECK_FALSE(std::filesystem::exists(r.t.path / "run" / "checkpoints" / "latest"));
  CHECK(sh("pgrep -f '[" + (r.t.path / "run").string().substr(0, 1) + "]" +
           (r.t.path / "run").string().substr(1) + "'")
            .rc != 0);  // no rank left behind
}

TEST_CASE(
    "SIGTERM to one rank stops every rank after the same step, saves it, and the launcher exits 3, "
    "not 1") {
  SignalRun r("save", 100000);
  const int rc = r.train_and_signal("--set parallel.nproc=2", "TERM", true);
  INFO(r.log());
  CHECK(rc == 3);
  CHECK(has(r.log(), "[rank 0] stopped by a signal on another rank after step "));
  CHECK(has(r.log(), "its checkpoint is saved"));
  CHECK_FALSE(has(r.log(), "job failed"));
  CHECK(sh("pgrep -f '[" + (r.t.path / "run").string().substr(0, 1) + "]" +
           (r.t.path / "run").string().substr(1) + "'")
            .rc != 0);
}

TEST_CASE(
    "SIGHUP (a closed terminal) stops a run after a whole step and saves it, as SIGTERM does") {
  SignalRun r("save", 100000);
  const int rc = r.train_and_signal("", "HUP");
  INFO(r.log());
  CHECK(rc == 3);
  CHECK(has(r.log(), "stopped by SIGHUP after step "));
  CHECK(has(r.log(), "its checkpoint is saved"));
}

TEST_CASE(
    "a stop on a step that was due to be saved anyway says it is saved, even with on_signal = "
    "exit") {
  SignalRun r("exit", 1);
  const int rc = r.train_and_signal("", "TERM");
  INFO(r.log());
  CHECK(rc == 3);
  CHECK(has(r.log(), "its checkpoint is saved"));
  CHECK_FALSE(has(r.log(), "nothing saved"));
}

TEST_CASE("a frozen rank is named as the cause, not the rank that timed out waiting for it") {
  SignalRun r("save", 100000);
  const int rc =
      r.train_and_signal("--set parallel.nproc=2 --set parallel.timeout_s=3", "STOP", true);
  INFO(r.log());
  CHECK(rc == 1);
  CHECK(has(r.log(),
            "loom: job failed: rank 1 was frozen (state T: stopped by a signal) and stopped "
            "answering; rank 0 exited "
            "with status 1 waiting for it"));
  CHECK(sh("pgrep -f '[" + (r.t.path / "run").string().substr(0, 1) + "]" +
           (r.t.path / "run").string().substr(1) + "'")
            .rc != 0);
}
