#include "core/cpus.hpp"

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <thread>

#include "core/cgroup.hpp"

namespace loom {

namespace {

int affinity_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

// cpu.max is "QUOTA PERIOD" (or "max PERIOD"); the tightest over this cgroup and its parents.
double quota_cpus(const std::string& root) {
  return tightest_limit(root, "cpu.max", [](std::istream& in) {
    std::string quota;
    double period = 0;
    return in >> quota >> period && quota != "max" && period > 0 ? std::atof(quota.c_str()) / period
                                                                 : 0.0;
  });
}

}  // namespace

CpuBudget usable_cpus(const std::string& cgroup_root) {
  CpuBudget b{affinity_cpus(), "affinity mask"};
  const double quota = quota_cpus(cgroup_root);
  if (quota > 0 && std::floor(quota + 0.01) < b.cpus) {
    std::ostringstream why;
    why << "cgroup quota " << quota << " CPUs";
    b = {std::max(1, static_cast<int>(std::floor(quota + 0.01))),
         why.str()};  // threads past the quota are throttled
  }
  return b;
}

CpuBudget threads_per_rank(int local_ranks, bool per_task, const std::string& cgroup_root) {
  const CpuBudget all = usable_cpus(cgroup_root);
  if (const char* slurm = std::getenv("SLURM_CPUS_PER_TASK")) {
    const int cpus = std::min(std::atoi(slurm), all.cpus);
    const std::string source = "SLURM_CPUS_PER_TASK=" + std::string(slurm);
    if (cpus > 0 && (per_task || local_ranks <= 1)) return {cpus, source};
    if (cpus > 0)
      return {std::max(1, cpus / local_ranks),
              source + " shared by " + std::to_string(local_ranks) + " ranks"};
  }
  if (local_ranks <= 1) return all;
  return {std::max(1, all.cpus / local_ranks),
          all.source + " shared by " + std::to_string(local_ranks) + " ranks"};
}

}  // namespace loom
