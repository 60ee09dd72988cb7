#include "ops/ops.hpp"

#include "core/errors.hpp"
#include "ops/cpu/kernels.hpp"
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
    set_tensor_allocator({cuda::managed_alloc, cuda::managed_free, {LOOM_DEVICE_CUDA, 0}});
    return cuda::ops();
#else
    throw ConfigError("[run] device = \"cuda\": this build has no CUDA kernels (the CUDA toolkit was not found; "
                      "install it and configure with -DLOOM_WITH_CUDA=ON)");
#endif
  }
  throw ConfigError("[run] device = \"" + device +
                    "\": this build has no kernels for it (built devices: cpu)");
}

int64_t device_peak_bytes(const std::string& device) {
#ifdef LOOM_HAVE_CUDA
  if (device == "cuda") return static_cast<int64_t>(cuda::memory_stats().peak);
#endif
  return device == "cpu" ? heap_tensor_peak_bytes() : 0;
}

int set_threads(const std::string& device, int threads) {
  return device == "cpu" ? cpu::set_threads(threads) : threads;
}

}  // namespace loom::ops
