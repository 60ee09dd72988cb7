#include "ops/ops.hpp"

#include "core/errors.hpp"
#include "ops/cpu/kernels.hpp"
#include "ops/strict/memory.hpp"
#include "ops/strict/streams.hpp"
#include "ops/strict/table.hpp"
#include "tensor/tensor.hpp"
#ifdef LOOM_HAVE_CUDA
#include "ops/cuda/kernels.hpp"
#include "ops/cuda/memory.hpp"
#endif

namespace loom::ops {

const loom_ops* for_device(const std::string& device) {
  if (device == "cpu") return cpu();
  if (device == "cuda") {
#ifdef LOOM_HAVE_CUDA
    std::string why;
    if (!cuda::available(&why)) throw ConfigError("[run] device = \"cuda\": " + why);
    cuda::select_device();
    // Tensors from here on live in managed memory, reachable from the kernels and the host code.
    set_tensor_allocator({cuda::managed_alloc, cuda::managed_free, {LOOM_DEVICE_CUDA, 0}, cuda::ops()});
    return cuda::ops();
#else
    throw ConfigError("[run] device = \"cuda\": this build has no CUDA kernels (the CUDA toolkit was not found; "
                      "install it and configure with -DLOOM_WITH_CUDA=ON)");
#endif
  }
  if (device == "strict") {
    // Tensors from here on live where only the op table's kernels and copies reach them.
    set_tensor_allocator(
        {strict::device_alloc, strict::device_free, {LOOM_DEVICE_STRICT, 0}, strict::ops(), strict::is_device});
    return strict::ops();
  }
  throw ConfigError("[run] device = \"" + device + "\": this build has no kernels for it (built devices: " +
                    built_devices() + ")");
}

std::string built_devices() {
#ifdef LOOM_HAVE_CUDA
  return "cpu, strict, cuda";
#else
  return "cpu, strict";
#endif
}

int64_t device_peak_bytes(const std::string& device) {
  if (device == "strict") return static_cast<int64_t>(strict::memory_stats().peak);
#ifdef LOOM_HAVE_CUDA
  if (device == "cuda") return static_cast<int64_t>(cuda::memory_stats().peak);
#endif
  return device == "cpu" ? heap_tensor_peak_bytes() : 0;
}

int set_threads(const std::string& device, int threads) {
  if (device == "strict") {
    // The host's threads do no kernel work there; the stream workers do, with the same count.
    const int n = cpu::set_threads(threads);
    strict::set_worker_threads(n);
    return n;
  }
  return device == "cpu" ? cpu::set_threads(threads) : threads;
}

}  // namespace loom::ops
