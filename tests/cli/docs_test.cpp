// Scripts the docs hand to users, run as written: the sbatch requeue script of docs/cluster.md
// reaches `scontrol requeue` when the step is preempted.
#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <thread>

#include "support/process.hpp"

using loom::test::read_text;
using loom::test::sh;
using loom::test::TempDir;

namespace {

// The ```sh block of `doc` that holds `marker`.
std::string snippet(const std::string& doc, const std::string& marker) {
  const std::string text = read_text(doc);
  const size_t at = text.find(marker);
  REQUIRE(at != std::string::npos);
  const size_t begin = text.rfind("```sh\n", at) + 6, end = text.find("```", at);
  return text.substr(begin, end - begin);
}

}  // namespace

TEST_CASE("the documented requeue script requeues a preempted job, whether the step or the batch shell gets SIGTERM") {
  TempDir t;
  t.write("job.sh", snippet(LOOM_SOURCE_DIR "/docs/cluster.md", "# Requeue on preemption"));
  // srun stands in for the job step: it runs until SIGTERM, then exits 3 as a loom that saved
  // its step does (or at once with STUB_EXIT); scontrol records what it was asked.
  t.write("srun", "#!/bin/bash\n[ -n \"${STUB_EXIT:-}\" ] && exit $STUB_EXIT\ntrap 'exit 3' TERM\nwhile :; do sleep 0.1; done\n");
  t.write("scontrol", "#!/bin/bash\necho \"$*\" >> \"$STUB_LOG\"\n");
  const std::string dir = t.path.string();
  sh("chmod +x " + dir + "/srun " + dir + "/scontrol");
  const std::string env = "PATH=" + dir + ":$PATH SLURM_JOB_ID=42 STUB_LOG=" + dir + "/log ";

  auto exited = sh(env + "STUB_EXIT=3 bash " + dir + "/job.sh");
  CHECK(exited.rc == 3);
  CHECK(read_text(t.path / "log") == "requeue 42\n");

  sh("rm -f " + dir + "/log");
  sh("(" + env + "bash " + dir + "/job.sh; echo $? > " + dir + "/rc) > /dev/null 2>&1 & echo $! > " + dir + "/pid");
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  sh("kill -TERM $(pgrep -f '^bash " + dir + "/job.sh')");
  for (int i = 0; i < 100 && read_text(t.path / "rc").empty(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK(read_text(t.path / "rc") == "3\n");
  CHECK(read_text(t.path / "log") == "requeue 42\n");

  auto failed = sh(env + "STUB_EXIT=1 bash " + dir + "/job.sh");
  CHECK(failed.rc == 1);
  CHECK(read_text(t.path / "log") == "requeue 42\n");  // a failure is not requeued
}
