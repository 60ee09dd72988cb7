// Real processes over gloo on loopback: collectives, the launcher, and a rank dying mid-run.
#include <doctest/doctest.h>
#include <signal.h>

#include <chrono>
#include <fstream>
#include <thread>
#include <vector>

#include "distributed/comm_bench.hpp"
#include "support/process.hpp"

using loom::test::run_loom;
using loom::test::sh;
using loom::test::TempDir;

namespace {
bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}
}  // namespace

TEST_CASE("every collective is correct on 2, 3 and 4 ranks") {
  for (int n : {2, 3, 4}) {
    auto r = run_loom("launch -n " + std::to_string(n) + " -- " COLLECTIVES_WORKER);
    INFO(r.out);
    CHECK(r.rc == 0);
    CHECK(has(r.out, "all collectives correct on " + std::to_string(n) + " ranks"));
    CHECK_FALSE(has(r.out, "FAILED"));
  }
}

TEST_CASE(
    "ranks that issue different collectives get an error naming the operation on each, not "
    "SIGABRT") {
  // Rank 0 all-reduces 4096 floats, rank 1 1024: gloo aborts inside its event loop on one of them.
  auto r = run_loom("launch -n 2 -- " COLLECTIVES_WORKER " gloo mismatch");
  INFO(r.out);
  CHECK(r.rc == 1);
  CHECK_FALSE(has(r.out, "signal"));
  CHECK(has(r.out, "all_reduce of 4096 x f32 #1"));
  CHECK(has(r.out, "all_reduce of 1024 x f32 #1"));
  CHECK(has(r.out, "every rank must issue the same collectives with the same sizes"));
}

TEST_CASE(
    "a collective one element longer on one rank is caught by gloo's signature check, not summed "
    "in part") {
  // On 3 ranks gloo's ring all-reduce of 1025 against 1024 elements completes without a word.
  auto silent =
      run_loom("launch -n 3 -- " COLLECTIVES_WORKER " gloo off_by_one", "GLOO_CHECK_EVERY=0");
  CHECK(silent.rc == 0);
  // Checked (the default: the first 64 collectives, then every 64th), it fails at #128.
  auto r = run_loom("launch -n 3 -- " COLLECTIVES_WORKER " gloo off_by_one");
  INFO(r.out);
  CHECK(r.rc == 1);
  CHECK(has(r.out,
            "all_reduce of 1024 x f32 #128: group rank 1 runs all_reduce of 1024 x f32, group rank "
            "0 runs all_reduce of "
            "1025 x f32 (every rank must issue the same collectives with the same sizes)"));
  auto every =
      run_loom("launch -n 3 -- " COLLECTIVES_WORKER " gloo off_by_one", "GLOO_CHECK_EVERY=1");
  CHECK(
      has(every.out, "all_reduce of 1024 x f32 #101: group rank 1 runs all_reduce of 1024 x f32"));
}

TEST_CASE("the launcher prefixes output and names the first rank that fails") {
  auto r = run_loom(
      "launch -n 3 -- /bin/sh -c 'echo hello from $RANK of $WORLD_SIZE; [ $RANK = 1 ] && sleep 1 "
      "&& exit 3; sleep 30'");
  CHECK(r.rc == 1);
  CHECK(has(r.out, "[rank 0] hello from 0 of 3"));
  CHECK(has(r.out, "[rank 2] hello from 2 of 3"));
  CHECK(has(r.out, "loom: job failed: rank 1 exited with status 3"));
}

TEST_CASE("the launcher passes on everything a rank prints just before it exits") {
  auto r = run_loom("launch -n 2 -- /bin/sh -c 'seq 1 20000'");
  CHECK(r.rc == 0);
  CHECK(has(r.out, "[rank 0] 20000\n"));
  CHECK(has(r.out, "[rank 1] 20000\n"));
  size_t lines = 0;
  for (char ch : r.out) lines += ch == '\n';
  CHECK(lines >= 40000);
}

TEST_CASE("a rank killed mid-run ends the job within 30 s, naming it, with no process left") {
  TempDir t;
  std::string text;
  for (int i = 0; i < 300; ++i)
    text += "a fault test needs some text to train on, line " + std::to_string(i) + "\n";
  t.write("c.txt", text);
  REQUIRE(run_loom("data prepare --text " + (t.path / "c.txt").string() + " --out " +
                   (t.path / "d").string())
              .rc == 0);
  std::string cfg = t.write("f.toml",
                            "[run]\nthreads = 1\npeak_gflops = 10\n[model]\npreset = \"tiny\"\n"
                            "[data]\ndir = \"" +
                                (t.path / "d").string() +
                                "\"\n"
                                "[train]\nsteps = 100000\nglobal_batch = 4\neval_every = 0\n"
                                "[parallel]\nnproc = 2\n");
  std::string log = (t.path / "log").string(), pidfile = (t.path / "pid").string();
  // Start the job in the background; its launcher's pid goes to pidfile.
  sh("LOOM_PLUGIN_PATH=" LOOM_TEST_PLUGIN_DIR " " LOOM_BIN " train " + cfg + " --run-dir " +
     (t.path / "run").string() + " > " + log + " 2>&1 & echo $! > " + pidfile);
  std::string launcher = sh("cat " + pidfile).out;
  launcher.erase(launcher.find_last_not_of(" \n") + 1);
  // Wait until both ranks are training (step lines appear), then kill rank 1.
  for (int i = 0; i < 300 && !has(sh("cat " + log).out, "step "); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  REQUIRE(has(sh("cat " + log).out, "step "));
  std::string kids = sh("pgrep -P " + launcher).out;
  std::vector<std::string> pids;
  for (size_t p = 0; p < kids.size();) {
    size_t nl = kids.find('\n', p);
    pids.push_back(kids.substr(p, nl - p));
    p = nl == std::string::npos ? kids.size() : nl + 1;
  }
  REQUIRE(pids.size() == 2);
  auto t0 = std::chrono::steady_clock::now();
  sh("kill -9 " + pids[1]);
  bool gone = false;
  while (std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30)) {
    if (sh("kill -0 " + launcher).rc != 0) {
      gone = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  CHECK(gone);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30));
  std::string out = sh("cat " + log).out;
  CHECK(has(out, "rank 1 was killed by signal 9"));
  CHECK(sh("kill -0 " + pids[0]).rc != 0);  // the surviving rank was stopped too
  CHECK(sh("kill -0 " + pids[1]).rc != 0);
  if (!gone) sh("kill -9 " + launcher + " " + pids[0]);
}

TEST_CASE("loom bench comm prints nccl-tests rows with no wrong results for every op") {
  for (const char* op :
       {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "sendrecv"}) {
    auto r = run_loom(std::string("bench comm --op ") + op +
                      " --min-bytes 8 --max-bytes 64K --nproc 2 --iters 2 --warmup 1");
    INFO(op << "\n" << r.out);
    CHECK(r.rc == 0);
    CHECK(has(r.out, "# Avg bus bandwidth"));
    CHECK(has(r.out, "(GB/s)"));
    // Every data row: its measured group's #wrong is zero, and the op's other variant says n/a.
    size_t rows = 0, pos = 0;
    while ((pos = r.out.find("[rank 0]  ", pos)) != std::string::npos) {
      size_t eol = r.out.find('\n', pos);
      const std::string line = r.out.substr(pos, eol - pos);
      const auto row = loom::dist::parse_comm_bench_row(line);
      REQUIRE(row);
      CHECK(row->wrong == 0);
      CHECK(has(line, "n/a"));
      ++rows;
      pos = eol;
    }
    CHECK(has(r.out, "out-of-place"));
    CHECK(has(r.out, "in-place"));
    CHECK(rows == 14);  // 8 B .. 64 KiB, doubling
  }
  auto bad = run_loom("bench comm --op all_reduse --nproc 1");
  CHECK(bad.rc == 2);
  CHECK(has(bad.out, "unknown --op 'all_reduse'"));
}

TEST_CASE("without a supervising launcher, a dead peer fails the survivor's collective, named") {
  // As under srun or mpirun: each rank is started on its own with the torchrun variables.
  TempDir t;
  std::string text;
  for (int i = 0; i < 300; ++i)
    text += "a dead peer must not hang the survivor, line " + std::to_string(i) + "\n";
  t.write("c.txt", text);
  REQUIRE(run_loom("data prepare --text " + (t.path / "c.txt").string() + " --out " +
                   (t.path / "d").string())
              .rc == 0);
  std::string cfg = t.write("f.toml",
                            "[run]\nthreads = 1\npeak_gflops = 10\n[model]\npreset = \"tiny\"\n"
                            "[data]\ndir = \"" +
                                (t.path / "d").string() +
                                "\"\n"
                                "[train]\nsteps = 100000\nglobal_batch = 4\neval_every = 0\n"
                                "[parallel]\ntimeout_s = 20\n");
  int port = 0;
  {
    auto p =
        sh("python3 -c 'import socket; s = socket.socket(); s.bind((\"127.0.0.1\", 0)); "
           "print(s.getsockname()[1])'");
    port = std::stoi(p.out);
  }
  std::string env = "LOOM_PLUGIN_PATH=" LOOM_TEST_PLUGIN_DIR
                    " WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" +
                    std::to_string(port);
  for (int r = 0; r < 2; ++r)
    sh("( " + env + " RANK=" + std::to_string(r) + " LOCAL_RANK=" + std::to_string(r) +
       " " LOOM_BIN " train " + cfg + " --run-dir " +
       (t.path / ("run" + std::to_string(r))).string() + " > " +
       (t.path / ("log" + std::to_string(r))).string() + " 2>&1; echo $? > " +
       (t.path / ("rc" + std::to_string(r))).string() + " ) > /dev/null 2>&1 &");
  auto log0 = [&] { return sh("cat " + (t.path / "log0").string()).out; };
  for (int i = 0; i < 300 && !has(log0(), "step "); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  REQUIRE(has(log0(), "step "));
  // Rank 1 dies; rank 0 must end by itself within the timeout, non-zero, naming the collective.
  sh("pkill -9 -f 'run-dir " + (t.path / "run1").string() + "'");
  bool ended = false;
  auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30)) {
    if (std::filesystem::exists(t.path / "rc0") &&
        !sh("cat " + (t.path / "rc0").string()).out.empty()) {
      ended = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  REQUIRE(ended);
  CHECK(sh("cat " + (t.path / "rc0").string()).out == "1\n");
  std::string out = log0();
  CHECK(has(out, "all_reduce of "));
  CHECK(has(out, " over 2 ranks failed on group rank 0"));
  CHECK(has(out, "ring neighbours in this group: ranks 1 and 1"));
  sh("pkill -9 -f 'run-dir " + (t.path / "run").string() + "'");  // nothing should be left; be sure
}
