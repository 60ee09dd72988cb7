#include "ops/cuda/memory.hpp"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "core/errors.hpp"
#include "ops/cuda/common.cuh"

namespace loom::cuda {

namespace {

size_t size_class(size_t bytes) {
  if (bytes > (64u << 20)) return (bytes + (2u << 20) - 1) / (2u << 20) * (2u << 20);
  size_t c = 256;
  while (c < bytes) c *= 2;
  return c;
}

std::string mib(size_t bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f MiB", static_cast<double>(bytes) / 1048576.0);
  return b;
}

// A freed block and the event after the work its last stream had queued when it was freed.
struct FreeBlock {
  char* p = nullptr;
  cudaEvent_t freed = nullptr;
};

struct Pool {
  std::mutex m;
  std::map<size_t, std::vector<FreeBlock>> free;
  std::map<char*, size_t> live;  // block -> its size class
  std::vector<cudaEvent_t> spare_events;
  MemoryStats stats;
  size_t cap = 0;

  cudaEvent_t take_event() {
    if (!spare_events.empty()) {
      cudaEvent_t e = spare_events.back();
      spare_events.pop_back();
      return e;
    }
    cudaEvent_t e = nullptr;
    LOOM_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return e;
  }

  // A new block from the driver. On exhaustion the cached blocks go back first: they are idle
  // once the device has finished what was queued, which the host then waits for (the one
  // synchronisation an allocation may make, and only when the GPU is full).
  char* grow(size_t c, size_t asked) {
    void* p = nullptr;
    if (cudaMalloc(&p, c) != cudaSuccess) {
      cudaGetLastError();
      LOOM_CUDA_CHECK(cudaDeviceSynchronize());
      for (auto& [cls, list] : free)
        for (FreeBlock& b : list) {
          cudaFree(b.p);
          spare_events.push_back(b.freed);
          stats.reserved -= cls;
        }
      free.clear();
      if (cudaMalloc(&p, c) != cudaSuccess) {
        cudaGetLastError();
        size_t left = 0, total = 0;
        cudaMemGetInfo(&left, &total);
        throw RuntimeError("cuda: out of device memory: asked " + mib(asked) + " (" +
                           std::to_string(asked) + " bytes), " + mib(left) + " free of the GPU's " +
                           mib(total) + ", " + mib(stats.in_use) + " in Loom's tensors");
      }
    }
    stats.reserved += c;
    return static_cast<char*>(p);
  }
};

Pool& pool() {
  static Pool* p = new Pool;  // never destroyed: tensors may outlive static destruction order
  return *p;
}

// Pinned blocks for staged host arrays, each with the event after its last copy.
struct PinnedBlock {
  void* p = nullptr;
  size_t bytes = 0;
  cudaEvent_t done = nullptr;
};
struct PinnedPool {
  std::mutex m;
  std::vector<PinnedBlock> idle;
};
PinnedPool& pinned_pool() {
  static PinnedPool* p = new PinnedPool;
  return *p;
}

std::atomic<int64_t> g_host_waits{0};

}  // namespace

void* device_alloc(size_t bytes) {
  Pool& p = pool();
  const size_t c = size_class(bytes ? bytes : 1);
  std::lock_guard<std::mutex> lock(p.m);
  if (p.cap && p.stats.in_use + c > p.cap)
    throw RuntimeError("cuda: out of device memory: asked " + mib(bytes) + " (" +
                       std::to_string(bytes) + " bytes), " + mib(p.cap - p.stats.in_use) +
                       " left of the " + mib(p.cap) + " cap ([run] device_memory_mib), " +
                       mib(p.stats.in_use) + " in use");
  char* ptr = nullptr;
  auto& list = p.free[c];
  if (!list.empty()) {
    const FreeBlock b = list.back();
    list.pop_back();
    // The stream this block goes to starts after the work of the stream that freed it.
    LOOM_CUDA_CHECK(cudaStreamWaitEvent(stream(), b.freed, 0));
    p.spare_events.push_back(b.freed);
    ptr = b.p;
  } else {
    ptr = p.grow(c, bytes);
  }
  p.live[ptr] = c;
  p.stats.in_use += c;
  if (p.stats.in_use > p.stats.peak) p.stats.peak = p.stats.in_use;
  p.stats.peak_since_mark = std::max(p.stats.peak_since_mark, p.stats.in_use);
  return ptr;
}

// Errors are ignored here: a tensor may die after the CUDA context has (process exit).
void device_free(void* ptr) {
  if (!ptr) return;
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.m);
  auto it = p.live.find(static_cast<char*>(ptr));
  if (it == p.live.end()) return;
  FreeBlock b{it->first, p.take_event()};
  cudaEventRecord(b.freed, stream());
  p.stats.in_use -= it->second;
  p.free[it->second].push_back(b);
  p.live.erase(it);
}

bool owns(const void* ptr) {
  Pool& p = pool();
  char* c = static_cast<char*>(const_cast<void*>(ptr));
  std::lock_guard<std::mutex> lock(p.m);
  auto it = p.live.upper_bound(c);
  if (it == p.live.begin()) return false;
  --it;
  return c < it->first + it->second;
}

void set_memory_cap(size_t bytes) {
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.m);
  p.cap = bytes;
}

MemoryStats memory_stats() {
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.m);
  return p.stats;
}

void mark_peak() {
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.m);
  p.stats.peak_since_mark = p.stats.in_use;
}

PinnedSlot::PinnedSlot(size_t bytes) : bytes_(bytes ? bytes : 1) {
  PinnedPool& pool = pinned_pool();
  {
    std::lock_guard<std::mutex> lock(pool.m);
    for (size_t i = 0; i < pool.idle.size(); ++i) {
      PinnedBlock& b = pool.idle[i];
      if (b.bytes < bytes_) continue;
      if (cudaEventQuery(b.done) != cudaSuccess) {
        cudaGetLastError();  // not ready: leave nothing for the next call to find
        continue;
      }
      data_ = b.p, bytes_ = b.bytes, done_ = b.done;
      pool.idle.erase(pool.idle.begin() + static_cast<std::ptrdiff_t>(i));
      return;
    }
  }
  LOOM_CUDA_CHECK(cudaHostAlloc(&data_, bytes_, cudaHostAllocDefault));
  LOOM_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
}

PinnedSlot::~PinnedSlot() {
  cudaEventRecord(done_, stream());
  PinnedPool& pool = pinned_pool();
  std::lock_guard<std::mutex> lock(pool.m);
  pool.idle.push_back(PinnedBlock{data_, bytes_, done_});
}

bool is_device_pointer(const void* p) {
  if (owns(p)) return true;
  cudaPointerAttributes a{};
  const bool device =
      cudaPointerGetAttributes(&a, p) == cudaSuccess && a.type == cudaMemoryTypeDevice;
  cudaGetLastError();  // a host pointer's query leaves an error behind on older drivers
  return device;
}

const void* stage_in(const void* host, size_t bytes, void* device_scratch) {
  if (!host || !bytes || is_device_pointer(host)) return host;
  PinnedSlot slot(bytes);
  std::memcpy(slot.data(), host, bytes);
  LOOM_CUDA_CHECK(
      cudaMemcpyAsync(device_scratch, slot.data(), bytes, cudaMemcpyHostToDevice, stream()));
  return device_scratch;
}

void wait_current_stream() {
  count_host_wait();
  LOOM_CUDA_CHECK(cudaStreamSynchronize(stream()));
}

void count_host_wait() { g_host_waits.fetch_add(1, std::memory_order_relaxed); }
int64_t host_waits() { return g_host_waits.load(std::memory_order_relaxed); }

}  // namespace loom::cuda
