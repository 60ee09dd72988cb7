// The strict device's op table: the CPU kernels, run by stream workers on memory the host cannot
// touch. Each entry names the bytes it reads and writes, refuses host memory where a GPU kernel
// could not read it, and queues the kernel on the calling thread's stream.
#pragma once

#include <loom/plugin.h>

#include "tensor/ops_v2.h"

namespace loom::strict {

const loom_ops_v2* ops();

// Bytes `copy` has moved from device memory to the host on the compute stream so far: the data
// round trips of host code (the comm stream's staging for gloo and MPI is left out).
int64_t host_read_bytes();

}  // namespace loom::strict
