// What every CUDA file shares: error checks that throw, and the streams the ops run on.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

namespace loom::cuda {

// A CUDA failure is a bug or a dead device: the runtime reports it as a RuntimeError.
void fail(cudaError_t e, const char* what, const char* file, int line);
#define LOOM_CUDA_CHECK(call)                                                           \
  do {                                                                                  \
    cudaError_t loom_e_ = (call);                                                       \
    if (loom_e_ != cudaSuccess) ::loom::cuda::fail(loom_e_, #call, __FILE__, __LINE__); \
  } while (0)
// After a launch: catches bad launch configurations at once (not at the next sync).
#define LOOM_CUDA_LAUNCHED() LOOM_CUDA_CHECK(cudaGetLastError())

// The device's two streams (LOOM_STREAM_COMPUTE, LOOM_STREAM_COMM), made on first use. Every op
// of the table is issued on the calling thread's current stream, in order, and returns without
// waiting for it: the host waits only through sync_event, synchronize, and the contract's host
// outputs (memory.hpp's wait_current_stream).
cudaStream_t stream_of(int which);
void set_current_stream(int which);
cudaStream_t stream();  // the calling thread's current stream

}  // namespace loom::cuda
