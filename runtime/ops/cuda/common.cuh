// What every CUDA file shares: error checks that throw and the stream all ops run on.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include <cuda_runtime.h>

namespace loom::cuda {

// A CUDA failure is a bug or a dead device: the runtime reports it as a RuntimeError.
void fail(cudaError_t e, const char* what, const char* file, int line);
#define LOOM_CUDA_CHECK(call)                                              \
  do {                                                                     \
    cudaError_t loom_e_ = (call);                                          \
    if (loom_e_ != cudaSuccess) ::loom::cuda::fail(loom_e_, #call, __FILE__, __LINE__); \
  } while (0)
// After a launch: catches bad launch configurations at once (not at the next sync).
#define LOOM_CUDA_LAUNCHED() LOOM_CUDA_CHECK(cudaGetLastError())

// The compute stream: every op of the table is issued on it, in order.
cudaStream_t stream();
// The end of every op: the stream is drained, so the host code between ops (which reads and
// writes the same managed memory) sees the kernels' results and never races them. The price is
// a synchronisation per op; overlapping ops with host work is the next step.
void finish_op();

}  // namespace loom::cuda
