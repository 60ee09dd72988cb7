// The limits a cgroup v2 puts on this process: its own cgroup's and every parent's (a container's,
// a Slurm job's, a systemd slice's), the tightest of which applies.
#pragma once

#include <istream>
#include <string>

namespace loom {

// This process's cgroup v2 directory under `root` (where cgroup v2 is mounted), from
// /proc/self/cgroup's "0::/path" line; `root` itself when there is none.
std::string own_cgroup(const std::string& root);

// The smallest positive value `read` takes from `file` in this process's cgroup and each parent up
// to `root`; 0 when none has one (no such file, or "max"). Reader: a limit from a file's stream,
// 0 for none.
using LimitReader = double (*)(std::istream&);
double tightest_limit(const std::string& root, const std::string& file, LimitReader read);

}  // namespace loom
