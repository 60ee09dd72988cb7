// The CUDA op table: the device check, the compute stream, and the loom_ops that points at the
// kernels of this folder. Pointers passed to it are device memory.
#include <cstdlib>
#include <string>

#include "ops/kernel_entries.hpp"
#include "ops/cuda/common.cuh"
#include "ops/cuda/kernels.hpp"

namespace loom::cuda {

void fail(cudaError_t e, const char* what, const char* file, int line) {
  throw std::runtime_error(std::string("CUDA error ") + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ") in " +
                           what + " at " + file + ":" + std::to_string(line));
}

bool available(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    if (why) *why = e != cudaSuccess ? std::string("no CUDA driver or device: ") + cudaGetErrorString(e) : "no CUDA device visible";
    cudaGetLastError();  // clear the sticky error of a failed probe
    return false;
  }
  return true;
}

void select_device() {
  int n = 0;
  LOOM_CUDA_CHECK(cudaGetDeviceCount(&n));
  const char* local = std::getenv("LOCAL_RANK");
  LOOM_CUDA_CHECK(cudaSetDevice((local ? std::atoi(local) : 0) % n));
}

cudaStream_t stream() {
  static cudaStream_t s = [] {
    cudaStream_t created = nullptr;
    LOOM_CUDA_CHECK(cudaStreamCreateWithFlags(&created, cudaStreamNonBlocking));
    return created;
  }();
  return s;
}

void finish_op() { LOOM_CUDA_CHECK(cudaStreamSynchronize(stream())); }

const loom_ops* ops() {
  std::string why;
  if (!available(&why)) throw std::runtime_error("the CUDA op table needs a GPU: " + why);
  static const loom_ops table = [] {
    loom_ops t{};
    t.v = LOOM_VERSION_OF(loom_ops);
    t.device = {LOOM_DEVICE_CUDA, 0};
    LOOM_OPS_KERNEL_ENTRIES(t, loom::cuda);
    // Managed memory: the host reaches it, and every op has drained the stream when it returns,
    // so the device contract's entries are immediate here, as on the CPU.
    t.host_reachable = 1;
    t.copy = [](void* dst, const void* src, int64_t n) {
      if (n > 0) LOOM_CUDA_CHECK(cudaMemcpy(dst, src, static_cast<size_t>(n), cudaMemcpyDefault));
    };
    t.zero = [](void* dst, int64_t n) {
      if (n > 0) LOOM_CUDA_CHECK(cudaMemsetAsync(dst, 0, static_cast<size_t>(n), stream()));
      finish_op();
    };
    t.set_stream = [](int32_t) {};
    t.record_event = []() -> int64_t { return 0; };
    t.wait_event = [](int64_t) {};
    t.sync_event = [](int64_t) { finish_op(); };
    t.synchronize = [] { LOOM_CUDA_CHECK(cudaDeviceSynchronize()); };
    t.pinned_alloc = [](int64_t n) -> void* {
      void* p = nullptr;
      LOOM_CUDA_CHECK(cudaMallocHost(&p, static_cast<size_t>(n > 0 ? n : 1)));
      return p;
    };
    t.pinned_free = [](void* p) { cudaFreeHost(p); };
    return t;
  }();
  return &table;
}

}  // namespace loom::cuda
