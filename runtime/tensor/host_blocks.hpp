// Host-heap tensor memory kept for reuse. A training step allocates the same temporaries again
// and again (GEMM operand copies, gathered rows, deferred gradients); glibc hands blocks of a few
// hundred KiB up from fresh mmap'd or trimmed pages, so each one costs a page fault per 4 KiB on
// its first write. Blocks of at least kMinCached bytes are kept when freed and handed out again
// for a request of exactly their size, as a GPU caching allocator does, up to a bounded total.
#pragma once

#include <cstddef>
#include <cstdint>

namespace loom::host_blocks {

constexpr size_t kMinCached = size_t{256} << 10;

// A 64-byte-aligned block of `bytes` (a multiple of 64): a cached one of that size, or a new one;
// nullptr when the heap is out of memory.
void* take(size_t bytes);
// `p` (from take, of `bytes`) is free: kept for the next take of its size. A cache it would take
// past its limit returns what it holds to the heap first. take releases the cache and tries again
// when the heap is short.
void give(void* p, size_t bytes);
// The most the cache holds: 1/16 of the memory this process may use (physical memory, or a cgroup
// v2 memory.max below it: core/memory_budget.hpp) shared by `ranks` ranks on the machine, at most
// 1 GiB: enough for a step's temporaries at the sizes a CPU trains, little beside what the run
// itself holds.
size_t limit_for(int64_t usable_bytes, int ranks);
// The ranks sharing this machine's memory (a run's local world); 1 until a run says.
void share_memory(int ranks);
// Bytes held in the cache now (free blocks, counted in no tensor's peak).
int64_t cached_bytes();
// Returns every cached block to the heap.
void release_cached();

}  // namespace loom::host_blocks
