// Device memory for the CUDA op table and the trainer: a caching allocator over managed memory
// (host code and kernels both reach it, so the runtime's host-side code runs unchanged while
// the kernels run on the GPU), and staging for the few host arrays the ops read or write
// (tokens, targets, per-row losses).
#pragma once

#include <cstddef>
#include <cstdint>

namespace loom::cuda {

// Size classes are kept on free lists when a tensor dies and reused by the next allocation of
// the class, so cudaMallocManaged runs while the first steps grow the pool, not in every step.
void* managed_alloc(size_t bytes);
void managed_free(void* p);

struct MemoryStats {
  size_t in_use = 0, peak = 0, reserved = 0;  // bytes handed out now, at most, and held in all
};
MemoryStats memory_stats();

// Whether a kernel can dereference `p` (device or managed memory).
bool device_reachable(const void* p);

// A device copy of a host array for the length of one op: copied in at construction when
// `in`, copied back at destruction when `out`. Device-reachable arrays pass through untouched.
class Staged {
 public:
  Staged(void* p, size_t bytes, bool in, bool out);
  ~Staged();
  Staged(const Staged&) = delete;
  Staged& operator=(const Staged&) = delete;
  template <class T>
  T* as() const { return static_cast<T*>(ptr_); }

 private:
  void *host_ = nullptr, *ptr_ = nullptr;
  size_t bytes_ = 0;
  bool out_ = false;
};

}  // namespace loom::cuda
