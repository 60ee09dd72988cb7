#include "ops/cuda/memory.hpp"

#include <map>
#include <mutex>
#include <vector>

#include "ops/cuda/common.cuh"

namespace loom::cuda {

namespace {

// Small requests round up to a power of two, large ones to whole 2 MiB pages.
size_t size_class(size_t bytes) {
  if (bytes > (64u << 20)) return (bytes + (2u << 20) - 1) / (2u << 20) * (2u << 20);
  size_t c = 256;
  while (c < bytes) c *= 2;
  return c;
}

struct Pool {
  std::mutex m;
  std::map<size_t, std::vector<void*>> free;
  std::map<void*, size_t> size_of;
  MemoryStats stats;
};
Pool& pool() {
  static Pool* p = new Pool;  // never destroyed: tensors may outlive static destruction order
  return *p;
}

}  // namespace

void* managed_alloc(size_t bytes) {
  Pool& p = pool();
  const size_t c = size_class(bytes);
  std::lock_guard<std::mutex> lock(p.m);
  void* ptr = nullptr;
  auto& list = p.free[c];
  if (!list.empty()) {
    ptr = list.back();
    list.pop_back();
  } else {
    LOOM_CUDA_CHECK(cudaMallocManaged(&ptr, c));
    p.stats.reserved += c;
  }
  p.size_of[ptr] = c;
  p.stats.in_use += c;
  if (p.stats.in_use > p.stats.peak) p.stats.peak = p.stats.in_use;
  return ptr;
}

void managed_free(void* ptr) {
  if (!ptr) return;
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.m);
  auto it = p.size_of.find(ptr);
  if (it == p.size_of.end()) return;
  p.stats.in_use -= it->second;
  p.free[it->second].push_back(ptr);
  p.size_of.erase(it);
}

MemoryStats memory_stats() {
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.m);
  return p.stats;
}

bool device_reachable(const void* p) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

Staged::Staged(void* p, size_t bytes, bool in, bool out) : bytes_(bytes), out_(out) {
  if (!p || device_reachable(p)) {
    ptr_ = p;
    return;
  }
  host_ = p;
  LOOM_CUDA_CHECK(cudaMalloc(&ptr_, bytes ? bytes : 1));
  if (in && bytes) LOOM_CUDA_CHECK(cudaMemcpyAsync(ptr_, p, bytes, cudaMemcpyHostToDevice, stream()));
}

Staged::~Staged() {
  if (!host_) return;
  if (out_ && bytes_) cudaMemcpyAsync(host_, ptr_, bytes_, cudaMemcpyDeviceToHost, stream());
  cudaStreamSynchronize(stream());
  cudaFree(ptr_);
}

}  // namespace loom::cuda
