// How many CPUs this process may use, as a scheduler or container limits it: the affinity mask
// (taskset, Slurm's binding, a cgroup cpuset), a cgroup v2 CPU quota (cpu.max), and Slurm's
// --cpus-per-task. std::thread::hardware_concurrency() sees none of these.
#pragma once

#include <string>

namespace loom {

struct CpuBudget {
  int cpus = 1;  // for this process
  std::string
      source;  // what limited it: "affinity mask", "cgroup quota 2.5 CPUs", "SLURM_CPUS_PER_TASK=4"
};

// `cgroup_root`: where cgroup v2 is mounted (tests point it elsewhere).
CpuBudget usable_cpus(const std::string& cgroup_root = "/sys/fs/cgroup");

// Threads for one of `local_ranks` ranks on this machine with [run] threads = 0: Slurm's
// --cpus-per-task as it is when srun started each rank as a task (`per_task`), shared by the ranks
// when loom started them inside one task; else this process's CPUs shared evenly.
CpuBudget threads_per_rank(int local_ranks, bool per_task,
                           const std::string& cgroup_root = "/sys/fs/cgroup");

}  // namespace loom
