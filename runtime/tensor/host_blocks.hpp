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
// Bytes held in the cache now (free blocks, counted in no tensor's peak).
int64_t cached_bytes();
// Returns every cached block to the heap.
void release_cached();

}  // namespace loom::host_blocks
