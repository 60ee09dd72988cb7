// The launcher that runs a kernel header's launch sequence on the device (.cu files only; the
// kernel harness runs the same sequences on the CPU, ops/cuda/host/host_go.hpp).
#pragma once

#include <vector>

#include "ops/cuda/common.cuh"
#include "ops/cuda/device.cuh"

namespace loom::cuda {

// Runs a launch sequence on the compute stream. Workspace and uploads are stream-ordered
// allocations, freed (stream-ordered too) when the op's launcher goes out of scope.
class DeviceGo {
 public:
  DeviceGo() = default;
  DeviceGo(const DeviceGo&) = delete;
  DeviceGo& operator=(const DeviceGo&) = delete;
  ~DeviceGo() {
    for (void* p : held_) cudaFreeAsync(p, stream());
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
    void* p = nullptr;
    LOOM_CUDA_CHECK(cudaMallocAsync(&p, static_cast<size_t>(n > 0 ? n : 1) * sizeof(T), stream()));
    held_.push_back(p);
    return static_cast<T*>(p);
  }
  template <class T>
  const T* upload(const T* host, int64_t n) {
    T* d = workspace<T>(n);
    LOOM_CUDA_CHECK(cudaMemcpyAsync(d, host, static_cast<size_t>(n) * sizeof(T),
                                    cudaMemcpyHostToDevice, stream()));
    return d;
  }

 private:
  std::vector<void*> held_;
};

// One op of the table: its launch sequence on a launcher whose scratch is freed at the end, then
// the drain every op ends with (finish_op).
template <class F>
void run_op(F&& sequence) {
  {
    DeviceGo go;
    sequence(go);
  }
  finish_op();
}

}  // namespace loom::cuda
