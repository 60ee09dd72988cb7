// How much memory this process may use, as a container or scheduler limits it: the machine's
// physical memory, or a cgroup v2 memory.max below it (Slurm's --mem, a container's limit).
// sysconf(_SC_PHYS_PAGES) sees only the first.
#pragma once

#include <cstdint>
#include <string>

namespace loom {

// `cgroup_root`: where cgroup v2 is mounted (tests point it elsewhere).
int64_t usable_memory_bytes(const std::string& cgroup_root = "/sys/fs/cgroup");

}  // namespace loom
