// The launcher that runs a kernel header's launch sequence on the device (.cu files only; the
// kernel harness runs the same sequences on the CPU, ops/cuda/host/host_go.hpp).
#pragma once

#include <cstring>
#include <vector>

#include "ops/cuda/common.cuh"
#include "ops/cuda/device.cuh"
#include "ops/cuda/memory.hpp"

namespace loom::cuda {

// Runs a launch sequence on the current stream. Workspace and uploads come from the caching
// allocator (so the memory cap and the peak count them), freed when the launcher goes out of
// scope: stream-ordered, as every free of that allocator is.
class DeviceGo {
 public:
  DeviceGo() = default;
  DeviceGo(const DeviceGo&) = delete;
  DeviceGo& operator=(const DeviceGo&) = delete;
  ~DeviceGo() {
    for (void* p : held_) device_free(p);
  }
  template <class... P, class... A>
  void operator()(const char*, void (*kernel)(P...), Shape s, A... args) {
    if (s.shared > 48 * 1024)  // beyond the default: opt in (sm_80 allows 163 KiB, sm_90 227 KiB)
      LOOM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(s.shared)));
    kernel<<<s.grid, s.block, s.shared, stream()>>>(static_cast<P>(args)...);
    LOOM_CUDA_LAUNCHED();
  }
  template <class T>
  T* workspace(int64_t n) {
    void* p = device_alloc(static_cast<size_t>(n > 0 ? n : 1) * sizeof(T));
    held_.push_back(p);
    return static_cast<T*>(p);
  }
  // A host array the kernels read (the adamw list): through a pinned block, no host wait.
  template <class T>
  const T* upload(const T* host, int64_t n) {
    T* d = workspace<T>(n);
    stage_in_always(host, static_cast<size_t>(n) * sizeof(T), d);
    return d;
  }
  // An operand the contract lets be host memory (tokens, targets, positions, rope tables):
  // device memory as it is, a host array uploaded.
  template <class T>
  const T* in(const T* p, int64_t n) {
    if (!p || n <= 0 || is_device_pointer(p)) return p;
    return static_cast<const T*>(stage_in(p, static_cast<size_t>(n) * sizeof(T), workspace<T>(n)));
  }
  // An output the contract lets be host memory (per-row losses, a norm): kernels write device
  // memory, copied to `p` when the op ends (finish), after the one host wait the contract allows.
  template <class T>
  T* out(T* p, int64_t n) {
    if (!p || n <= 0 || is_device_pointer(p)) return p;
    T* d = workspace<T>(n);
    fetches_.push_back(Fetch{p, d, static_cast<size_t>(n) * sizeof(T)});
    return d;
  }
  void finish() {
    if (fetches_.empty()) return;
    size_t total = 0;
    for (const Fetch& f : fetches_) total += f.bytes;
    PinnedSlot slot(total);
    size_t at = 0;
    for (const Fetch& f : fetches_) {
      LOOM_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(slot.data()) + at, f.device, f.bytes,
                                      cudaMemcpyDeviceToHost, stream()));
      at += f.bytes;
    }
    wait_current_stream();
    at = 0;
    for (const Fetch& f : fetches_) {
      std::memcpy(f.host, static_cast<char*>(slot.data()) + at, f.bytes);
      at += f.bytes;
    }
    fetches_.clear();
  }

 private:
  struct Fetch {
    void* host;
    const void* device;
    size_t bytes;
  };
  static void stage_in_always(const void* host, size_t bytes, void* device) {
    PinnedSlot slot(bytes);
    std::memcpy(slot.data(), host, bytes);
    LOOM_CUDA_CHECK(cudaMemcpyAsync(device, slot.data(), bytes, cudaMemcpyHostToDevice, stream()));
  }
  std::vector<void*> held_;
  std::vector<Fetch> fetches_;
};

// One op of the table: its launch sequence on a launcher whose scratch is freed at the end, and
// its host outputs, if any, copied back. Nothing waits otherwise.
template <class F>
void run_op(F&& sequence) {
  DeviceGo go;
  sequence(go);
  go.finish();
}

}  // namespace loom::cuda
