// The mpi comm plugin under a real mpirun: every collective, the training layouts against the
// single-rank run, declining outside MPI, and a killed rank ending the job with the rank named.
#include <doctest/doctest.h>

#include <chrono>

#include "support/layouts.hpp"

using namespace loom::test;

namespace {
bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}
const char* kModel =
    "n_layer = 2\nn_head = 4\nd_model = 32\nd_ff = 64\nvocab_size = 130\nseq_len = 16";
const char* kTrain = "steps = 10\nglobal_batch = 4\nlr = 3e-3\nwarmup_steps = 2";
}  // namespace

TEST_CASE("every collective is correct over mpi on 2 and 3 ranks") {
  for (int n : {2, 3}) {
    auto r = sh(mpirun(n) + " " COLLECTIVES_WORKER " mpi");
    INFO(r.out);
    CHECK(r.rc == 0);
    CHECK(has(r.out, "all collectives correct on " + std::to_string(n) + " ranks (mpi)"));
    CHECK_FALSE(has(r.out, "FAILED"));
  }
}

TEST_CASE("dp=2 and dp=2 x tp=2 under mpirun with the mpi plugin match the single-rank run, 1e-5") {
  LayoutRuns runs(kModel, kTrain);
  Curves one = runs.run("");
  Curves dp2 = runs.run("--set plugins.comm=mpi", mpirun(2));
  CHECK(has(dp2.out, "mesh: 2 ranks (launched by mpi)"));
  check_same(one, dp2, 1e-5, "mpirun -np 2, dp=2");
  check_same(one, runs.run("--set plugins.comm=mpi --set parallel.tp=2", mpirun(4)), 1e-5,
             "mpirun -np 4, dp=2 x tp=2");
  // gloo runs under mpirun too: the rank comes from Open MPI's environment either way.
  check_same(one, runs.run("", mpirun(2)), 1e-5, "mpirun -np 2 over gloo");
}

TEST_CASE("the mpi plugin declines when no MPI launcher started the job") {
  LayoutRuns runs(kModel, kTrain);
  auto r = runs.raw("--set parallel.nproc=2 --set plugins.comm=mpi");
  CHECK(r.rc != 0);
  CHECK(has(r.out, "plugin 'mpi' cannot run here: not launched by an MPI launcher"));
}

TEST_CASE("a rank killed under mpirun ends the job non-zero with the rank named, no process left") {
  LayoutRuns runs(kModel, "steps = 1000000\nglobal_batch = 4");
  TempDir t;
  const std::string dir = (t.path / "killed").string();
  auto t0 = std::chrono::steady_clock::now();
  auto r = sh(mpirun(2) +
              " bash -c '[ $OMPI_COMM_WORLD_RANK = 1 ] && (sleep 2; kill -9 $$) & exec " LOOM_BIN
              " train " +
              runs.config() + " --run-dir " + dir +
              " --set plugins.comm=mpi --set run.log_every=100000'");
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(r.out);
  CHECK(r.rc != 0);
  CHECK(has(r.out, "rank 1"));
  CHECK(has(r.out, "signal 9"));
  CHECK(s < 30);
  // "[k]illed" matches the run directory but not this pgrep's own command line.
  CHECK(sh("pgrep -f " + (t.path / "[k]illed").string()).out.empty());
}
