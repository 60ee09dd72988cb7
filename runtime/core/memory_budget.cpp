#include "core/memory_budget.hpp"

#include <unistd.h>

#include <cstdlib>
#include <istream>

#include "core/cgroup.hpp"

namespace loom {

int64_t usable_memory_bytes(const std::string& cgroup_root) {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  const int64_t ram = pages > 0 && page > 0 ? int64_t{pages} * page : int64_t{1} << 34;
  // memory.max is a byte count, or "max" for none.
  const double limit = tightest_limit(cgroup_root, "memory.max", [](std::istream& in) {
    std::string v;
    return in >> v && v != "max" ? std::atof(v.c_str()) : 0.0;
  });
  return limit > 0 && limit < static_cast<double>(ram) ? static_cast<int64_t>(limit) : ram;
}

}  // namespace loom
