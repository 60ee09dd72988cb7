// The op tables of each device. The trainer and the model only ever call through a loom_ops_v2*,
// so which device runs a step is decided once, by [run] device.
#pragma once

#include <loom/plugin.h>

#include <cstdint>
#include <string>

#include "tensor/ops_v2.h"

namespace loom::ops {

const loom_ops_v2* cpu();

// The table for a [run] device name; throws ConfigError when that device is not built in.
const loom_ops_v2* for_device(const std::string& device);

// What a device's op table declares of its memory (loom_ops_v2.host_reachable), known without the
// device: config check and loom plan judge a CUDA layout on a machine without a GPU. A test holds
// it equal to each built table's own field.
bool declared_host_reachable(const std::string& device);

// The devices this build has kernels for, "cpu, strict[, cuda]".
std::string built_devices();

// Peak bytes the device's tensors (and plugins' buffers from the host allocator) held at once;
// on the CPU, the host-heap tensors: the run's own memory without the process's code and libraries.
int64_t device_peak_bytes(const std::string& device);
// The same since mark_device_peak, which starts it again from what is held now (the runtime
// marks it before the first forward, past the setup's transient copies).
void mark_device_peak(const std::string& device);
int64_t device_peak_since_mark(const std::string& device);

// How many times the host has blocked on the device so far (0 on the CPU, where nothing is
// asynchronous): a step's count is the difference across it, the same on every run of a layout.
int64_t device_host_waits(const std::string& device);

// Bytes host code has copied out of device memory so far (the strict device counts its compute
// stream's copies to the host, leaving out the comm stream's staging; 0 elsewhere): a step's
// difference is its data round trips, which a layout that keeps its data on the device holds at 0.
int64_t device_host_read_bytes(const std::string& device);

// Caps the device's tensor memory at `bytes` (0: none): an allocation past it fails as a full
// GPU's does. ConfigError on the CPU, whose tensors are the host heap's.
void set_memory_cap(const std::string& device, int64_t bytes);

// The device's own stream handles for the loom.native_streams service (cudaStream_t on CUDA);
// nullptr on devices without them.
const loom_native_streams* native_streams(const std::string& device);

// What a device multiplies bf16 GEMM operands with when its table's gemm_operand_dtypes has
// bf16 ("the CPU's AMX (oneDNN 2.6.3)"; strict's kernels are the CPU's); "" where nothing does.
std::string bf16_gemm_instructions(const std::string& device);

// Sets kernel threads for the device (CPU: OpenMP and OpenBLAS); 0 = all cores. Returns count.
int set_threads(const std::string& device, int threads);

}  // namespace loom::ops
