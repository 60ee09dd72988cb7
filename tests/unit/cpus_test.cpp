// The CPU budget under [run] threads = 0: what a cgroup quota, an affinity mask and Slurm's
// --cpus-per-task allow, not the machine's core count.
#include "core/cpus.hpp"

#include <doctest/doctest.h>
#include <sched.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "support/cgroup.hpp"
#include "support/process.hpp"

namespace {

// A cgroup v2 tree under `root` whose directory for this process holds `cpu_max`.
void fake_cgroup(const std::filesystem::path& root, const std::string& cpu_max) {
  loom::test::fake_cgroup_file(root, "", "cpu.max", cpu_max);
}

int affinity() {
  cpu_set_t set;
  CPU_ZERO(&set);
  sched_getaffinity(0, sizeof set, &set);
  return CPU_COUNT(&set);
}

}  // namespace

TEST_CASE("a cgroup CPU quota caps the threads, rounded down, and says so") {
  if (affinity() < 2) return;  // one CPU: no quota can lower it
  loom::test::TempDir t;
  fake_cgroup(t.path, "150000 100000");
  const loom::CpuBudget b = loom::usable_cpus(t.path.string());
  CHECK(b.cpus == 1);
  CHECK(b.source == "cgroup quota 1.5 CPUs");
  fake_cgroup(t.path, "max 100000");
  CHECK(loom::usable_cpus(t.path.string()).cpus == affinity());
  CHECK(loom::usable_cpus(t.path.string()).source == "affinity mask");
}

TEST_CASE("ranks share the budget, and Slurm's --cpus-per-task is taken per task as it is") {
  loom::test::TempDir t;
  fake_cgroup(t.path, "max 100000");
  CHECK(loom::threads_per_rank(affinity() + 1, false, t.path.string()).cpus == 1);
  ::setenv("SLURM_CPUS_PER_TASK", "1", 1);
  const loom::CpuBudget slurm = loom::threads_per_rank(4, true, t.path.string());
  CHECK(slurm.cpus == 1);
  CHECK(slurm.source == "SLURM_CPUS_PER_TASK=1");
  if (affinity() >= 2) {  // one task of 2 CPUs whose 2 ranks loom started: 1 each, not 2 each
    ::setenv("SLURM_CPUS_PER_TASK", "2", 1);
    const loom::CpuBudget shared = loom::threads_per_rank(2, false, t.path.string());
    CHECK(shared.cpus == 1);
    CHECK(shared.source == "SLURM_CPUS_PER_TASK=2 shared by 2 ranks");
  }
  ::unsetenv("SLURM_CPUS_PER_TASK");
}
