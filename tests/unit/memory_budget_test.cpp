// The memory a process may use (core/memory_budget.hpp) and the host block cache's share of it
// (tensor/host_blocks.hpp): a cgroup's memory.max below the machine's memory bounds both, and
// ranks on one machine split the cache's bound.
#include "core/memory_budget.hpp"

#include <doctest/doctest.h>
#include <unistd.h>

#include "support/cgroup.hpp"
#include "support/process.hpp"
#include "tensor/host_blocks.hpp"

using namespace loom;

namespace {

int64_t physical() { return int64_t{sysconf(_SC_PHYS_PAGES)} * sysconf(_SC_PAGE_SIZE); }

}  // namespace

TEST_CASE("a cgroup's memory.max below the machine's memory is what a process may use") {
  test::TempDir t;
  test::fake_cgroup_file(t.path, "", "memory.max", "max");
  CHECK(usable_memory_bytes(t.path.string()) == physical());
  test::fake_cgroup_file(t.path, "", "memory.max", "3221225472");  // 3 GiB: this cgroup's
  CHECK(usable_memory_bytes(t.path.string()) == std::min<int64_t>(physical(), 3ll << 30));
  if (test::own_cgroup_path() != "/") {  // a parent's tighter limit applies too
    test::fake_cgroup_file(t.path, "/", "memory.max", "1073741824");
    CHECK(usable_memory_bytes(t.path.string()) == std::min<int64_t>(physical(), 1ll << 30));
  }
}

TEST_CASE("the host block cache holds 1/16 of the usable memory per rank, at most 1 GiB") {
  CHECK(host_blocks::limit_for(64ll << 30, 1) == size_t{1} << 30);
  CHECK(host_blocks::limit_for(8ll << 30, 1) == size_t{512} << 20);
  CHECK(host_blocks::limit_for(8ll << 30, 4) == size_t{128} << 20);
  CHECK(host_blocks::limit_for(8ll << 30, 0) == size_t{512} << 20);  // no ranks: one
  // So many ranks that a rank's share is under the smallest cached block: nothing is kept.
  host_blocks::release_cached();
  host_blocks::share_memory(1 << 30);
  const size_t big = host_blocks::kMinCached;
  host_blocks::give(host_blocks::take(big), big);
  CHECK(host_blocks::cached_bytes() == 0);
  host_blocks::share_memory(1);
  host_blocks::give(host_blocks::take(big), big);
  CHECK(host_blocks::cached_bytes() == static_cast<int64_t>(big));
  host_blocks::release_cached();
}
