// Device memory for the CUDA op table and the trainer, as the strict device's is: memory the host
// cannot dereference (host_reachable = 0), reached only through the table's asynchronous copies.
//
//  - Tensors come from a stream-ordered caching allocator over cudaMalloc: a freed block keeps
//    the event of the stream that freed it, and the next user's stream waits on that event (on
//    the device, not the host) before reusing it, so no free ever synchronises.
//  - The few host arrays an op reads or writes (tokens, targets, positions, losses, a norm) pass
//    through pinned blocks that are reused once the copy that used them has finished.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace loom::cuda {

// Size classes: small requests round up to a power of two, large ones to whole 2 MiB pages.
// Past the cap or the GPU's memory: a RuntimeError naming the size asked and the memory left.
// A block is freed on the stream of the freeing thread: every use of it on the other stream
// must be ordered before that stream's work by then (the runtime waits for a comm operation, or
// its copies back, before it drops the buffers).
void* device_alloc(size_t bytes);
void device_free(void* p);
// Whether p lies in a live block of device_alloc (views into a tensor too).
bool owns(const void* p);
// Whether a kernel can read p as it is: this allocator's memory, or other device memory (a
// plugin's cudaMalloc). Host memory, pageable or pinned, is not.
bool is_device_pointer(const void* p);
// The most bytes of blocks in use at once ([run] device_memory_mib); 0: the GPU's own memory.
// Freed blocks kept for reuse do not count.
void set_memory_cap(size_t bytes);

struct MemoryStats {
  size_t in_use = 0, peak = 0, reserved = 0;  // bytes handed out now, at most, and held in all
  size_t peak_since_mark = 0;                 // the most in use since mark_peak()
};
MemoryStats memory_stats();
// Starts peak_since_mark again from what is in use now.
void mark_peak();

// A pinned host block for one staged transfer, reused after the stream has passed `done`.
class PinnedSlot {
 public:
  explicit PinnedSlot(size_t bytes);  // takes a finished block of at least `bytes`, or makes one
  ~PinnedSlot();                      // records the event after the work queued so far
  PinnedSlot(const PinnedSlot&) = delete;
  PinnedSlot& operator=(const PinnedSlot&) = delete;
  void* data() const { return data_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  cudaEvent_t done_ = nullptr;
};

// A host array's device copy for one op, on the current stream: uploaded through a pinned slot
// (no host wait). Device memory passes through untouched.
const void* stage_in(const void* host, size_t bytes, void* device_scratch);

// The host blocks until the current stream's work so far is done, counted as one host wait:
// the contract's waits (a host output, sum_squares) and nothing else call it.
void wait_current_stream();
int64_t host_waits();
void count_host_wait();

}  // namespace loom::cuda
