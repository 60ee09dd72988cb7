// The op tables of each device. The trainer and the model only ever call through a loom_ops*,
// so which device runs a step is decided once, by [run] device.
#pragma once

#include <cstdint>
#include <string>

#include <loom/plugin.h>

namespace loom::ops {

const loom_ops* cpu();

// The table for a [run] device name; throws ConfigError when that device is not built in.
const loom_ops* for_device(const std::string& device);

// The devices this build has kernels for, "cpu, strict[, cuda]".
std::string built_devices();

// Peak bytes the device's tensors (and plugins' buffers from the host allocator) held at once;
// on the CPU, the host-heap tensors: the run's own memory without the process's code and libraries.
int64_t device_peak_bytes(const std::string& device);

// Sets kernel threads for the device (CPU: OpenMP and OpenBLAS); 0 = all cores. Returns count.
int set_threads(const std::string& device, int threads);

}  // namespace loom::ops
