// What every CUDA kernel file shares: error checks that throw, the stream all ops run on, and
// the launch arithmetic. Kernels are written for clarity first (llm.c style): one thread per
// element, or one warp per row, with the math in a comment above each.
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

constexpr int kBlock = 256;
constexpr int kWarp = 32;
inline unsigned blocks_for(int64_t n, int per_block = kBlock) {
  return static_cast<unsigned>((n + per_block - 1) / per_block);
}

#ifdef __CUDACC__  // device helpers: only in .cu files
__device__ inline float warp_sum(float v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ inline float warp_max(float v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
#endif

}  // namespace loom::cuda
