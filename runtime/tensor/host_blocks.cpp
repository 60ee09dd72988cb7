#include "tensor/host_blocks.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/memory_budget.hpp"

namespace loom::host_blocks {

namespace {

std::atomic<int> g_ranks{1};

// limit_for this process's memory and the ranks sharing it (read under the cache's lock).
size_t limit() {
  static const int64_t usable = usable_memory_bytes();
  return limit_for(usable, g_ranks.load());
}

struct Cache {
  std::mutex mu;
  std::unordered_map<size_t, std::vector<void*>> free_by_size;
  size_t held = 0;
};

Cache& cache() {
  static Cache* c = new Cache;  // never destroyed: tensors may be freed during exit
  return *c;
}

void release_locked(Cache& c) {
  for (auto& [bytes, blocks] : c.free_by_size)
    for (void* p : blocks) std::free(p);
  c.free_by_size.clear();
  c.held = 0;
}

}  // namespace

size_t limit_for(int64_t usable_bytes, int ranks) {
  const int64_t share = usable_bytes / std::max(1, ranks) / 16;
  return static_cast<size_t>(std::clamp<int64_t>(share, 0, int64_t{1} << 30));
}

void share_memory(int ranks) { g_ranks = std::max(1, ranks); }

void* take(size_t bytes) {
  if (bytes >= kMinCached) {
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mu);
    auto it = c.free_by_size.find(bytes);
    if (it != c.free_by_size.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      c.held -= bytes;
      return p;
    }
  }
  if (void* p = std::aligned_alloc(64, bytes)) return p;
  release_cached();  // the heap is short: what the cache holds goes back first
  return std::aligned_alloc(64, bytes);
}

void give(void* p, size_t bytes) {
  if (!p) return;
  if (bytes >= kMinCached) {
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mu);
    // Full: the sizes it holds may be ones no step asks for any more (an evaluation's, a sample's),
    // so they go back to the heap and the cache starts again from this block.
    if (c.held + bytes > limit()) release_locked(c);
    if (bytes <= limit()) {
      c.free_by_size[bytes].push_back(p);
      c.held += bytes;
      return;
    }
  }
  std::free(p);
}

int64_t cached_bytes() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  return static_cast<int64_t>(c.held);
}

void release_cached() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  release_locked(c);
}

}  // namespace loom::host_blocks
