#include "core/cpus.hpp"

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

namespace loom {

namespace {

int affinity_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

// This process's cgroup v2 directory, from /proc/self/cgroup's "0::/path" line.
std::string own_cgroup(const std::string& root) {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("0::", 0) == 0) return root + line.substr(3);
  return root;
}

// cpu.max is "QUOTA PERIOD" (or "max PERIOD"); the tightest over this cgroup and its parents.
double quota_cpus(const std::string& root) {
  double tightest = 0;
  for (std::string dir = own_cgroup(root); dir.size() >= root.size();
       dir = dir.substr(0, dir.rfind('/'))) {
    std::ifstream in(dir + "/cpu.max");
    std::string quota;
    double period = 0;
    if (in >> quota >> period && quota != "max" && period > 0) {
      const double cpus = std::atof(quota.c_str()) / period;
      if (cpus > 0 && (tightest == 0 || cpus < tightest)) tightest = cpus;
    }
    if (dir == root || dir.rfind('/') == std::string::npos) break;
  }
  return tightest;
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
