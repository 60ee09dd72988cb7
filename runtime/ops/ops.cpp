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

const loom_ops_v2* cpu() { return loom::cpu::op_table(); }

const loom_ops_v2* for_device(const std::string& device) {
  if (device == "cpu") return cpu();
  if (device == "cuda") {
#ifdef LOOM_HAVE_CUDA
    std::string why;
    if (!cuda::available(&why)) throw ConfigError("[run] device = \"cuda\": " + why);
    cuda::select_device();
    // Tensors from here on live in device memory, which only the op table's kernels and copies
    // reach (as on the strict device).
    set_tensor_allocator(
        {cuda::device_alloc, cuda::device_free, {LOOM_DEVICE_CUDA, 0}, cuda::ops(), cuda::owns});
    return cuda::ops();
#else
    throw ConfigError(
        "[run] device = \"cuda\": this build has no CUDA kernels (the CUDA toolkit was not found; "
        "install it and configure with -DLOOM_WITH_CUDA=ON)");
#endif
  }
  if (device == "strict") {
    // Tensors from here on live where only the op table's kernels and copies reach them.
    set_tensor_allocator({strict::device_alloc,
                          strict::device_free,
                          {LOOM_DEVICE_STRICT, 0},
                          strict::ops(),
                          strict::is_device});
    return strict::ops();
  }
  throw ConfigError("[run] device = \"" + device +
                    "\": this build has no kernels for it (built devices: " + built_devices() +
                    ")");
}

bool declared_host_reachable(const std::string& device) { return device == "cpu"; }

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

void mark_device_peak(const std::string& device) {
  if (device == "strict") return strict::mark_peak();
#ifdef LOOM_HAVE_CUDA
  if (device == "cuda") return cuda::mark_peak();
#endif
  mark_heap_tensor_peak();
}

int64_t device_peak_since_mark(const std::string& device) {
  if (device == "strict") return static_cast<int64_t>(strict::memory_stats().peak_since_mark);
#ifdef LOOM_HAVE_CUDA
  if (device == "cuda") return static_cast<int64_t>(cuda::memory_stats().peak_since_mark);
#endif
  return device == "cpu" ? heap_tensor_peak_since_mark() : 0;
}

int64_t device_host_waits(const std::string& device) {
  if (device == "strict") return strict::host_waits();
#ifdef LOOM_HAVE_CUDA
  if (device == "cuda") return cuda::host_waits();
#endif
  return 0;
}

int64_t device_host_read_bytes(const std::string& device) {
  return device == "strict" ? strict::host_read_bytes() : 0;
}

void set_memory_cap(const std::string& device, int64_t bytes) {
  if (device == "strict") return strict::set_memory_cap(static_cast<size_t>(bytes));
#ifdef LOOM_HAVE_CUDA
  if (device == "cuda") return cuda::set_memory_cap(static_cast<size_t>(bytes));
#endif
  if (bytes > 0)
    throw ConfigError(
        "[run] device_memory_mib caps a device's memory (strict, cuda); with [run] device = \"" +
        device + "\" tensors live on the host heap: remove it or set it to 0");
}

const loom_native_streams* native_streams(const std::string& device) {
#ifdef LOOM_HAVE_CUDA
  static const loom_native_streams cuda_streams{LOOM_VERSION_OF(loom_native_streams),
                                                cuda::native_stream};
  if (device == "cuda") return &cuda_streams;
#endif
  (void)device;
  return nullptr;
}

std::string bf16_gemm_instructions(const std::string& device) {
  const char* isa = device == "cpu" || device == "strict" ? cpu::bf16_instructions() : nullptr;
  return isa ? std::string("the CPU's ") + isa + " (" + cpu::gemm_library() + ")" : "";
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
