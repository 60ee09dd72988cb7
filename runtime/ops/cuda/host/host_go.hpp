// The harness's launcher: runs a kernel header's launch sequence on the CPU (see harness.hpp),
// with host memory for workspace and uploads. Workspace starts as 0xff bytes (NaN as floats),
// so a kernel that reads scratch it never wrote shows it.
#pragma once

#include <cstring>
#include <memory>
#include <vector>

#include "ops/cuda/device.cuh"

namespace loom::kh {

class HostGo {
 public:
  template <class... P, class... A>
  void operator()(const char* name, void (*kernel)(P...), loom::cuda::Shape s, A... args) {
    run(name, s.grid, s.block, s.shared, [&] { kernel(static_cast<P>(args)...); });
  }
  template <class T>
  T* workspace(int64_t n) {
    const size_t bytes = static_cast<size_t>(n > 0 ? n : 1) * sizeof(T);
    held_.push_back(
        std::make_unique<unsigned char[]>(bytes));  // new[]: aligned for any scalar type
    std::memset(held_.back().get(), 0xff, bytes);
    return reinterpret_cast<T*>(held_.back().get());
  }
  template <class T>
  const T* upload(const T* host, int64_t n) {
    T* p = workspace<T>(n);
    std::memcpy(static_cast<void*>(p), host, static_cast<size_t>(n) * sizeof(T));
    return p;
  }

 private:
  std::vector<std::unique_ptr<unsigned char[]>> held_;
};

}  // namespace loom::kh
