// What a kernel body sees under either compiler: nvcc's CUDA, or the kernel harness's host
// shims (ops/cuda/host/harness.hpp) when the same body is compiled for the CPU. The kernel
// headers (ops/cuda/kernels/*.cuh) include this and nothing CUDA-specific, and write each op as
// a launch sequence over a launcher `go`:
//   go(LOOM_KERNEL(k), Shape{grid, block, shared bytes}, args...)   one launch
//   go.template workspace<T>(n)                                      n T of scratch for this op
// ops/cuda/*.cu run a sequence on the GPU (DeviceGo, common.cuh); tests/kernels run the same
// sequence on the CPU through the harness (HostGo). Shared arrays are declared with
// LOOM_SHARED / LOOM_DYNAMIC_SHARED and handled through SharedPtr, so the harness sees each
// access.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#ifdef __CUDACC__
#include <cuda_runtime.h>
#define LOOM_SHARED(T, name, n) __shared__ T name[n]
#define LOOM_DYNAMIC_SHARED(T, name) extern __shared__ T name[]
namespace loom::cuda {
template <class T>
using SharedPtr = T*;
// n elements from offset of a shared array, as an array of their own (the harness names them and
// checks their bounds; on the GPU a pointer).
template <class T>
__device__ inline T* carve(T* from, int64_t offset, int64_t, const char*) {
  return from + offset;
}
}  // namespace loom::cuda
#else
#include "ops/cuda/host/harness.hpp"
#endif

// Loop unrolling for nvcc (loops over a warp's rows and a lane's channels, so their arrays stay in
// registers); nothing for the host compiler.
#ifdef __CUDACC__
#define LOOM_PRAGMA(x) _Pragma(#x)
#define LOOM_UNROLL LOOM_PRAGMA(unroll)
#define LOOM_UNROLL_BY(n) LOOM_PRAGMA(unroll n)
#else
#define LOOM_UNROLL
#define LOOM_UNROLL_BY(n)
#endif

// A kernel and its name, for the launcher (the harness logs names; the coverage test reads them).
#define LOOM_KERNEL(k) #k, k

namespace loom::cuda {

constexpr int kBlock = 256;
constexpr int kWarp = 32;
constexpr unsigned kFullMask = 0xffffffffu;

inline int64_t blocks_for(int64_t n, int64_t per_block = kBlock) {
  return (n + per_block - 1) / per_block;
}

// A one-dimensional grid of n blocks; past the x limit (2^31 - 1) is a clear error, not a
// truncated launch.
inline dim3 grid_of(int64_t n) {
  if (n > 2147483647)
    throw std::runtime_error("CUDA launch: " + std::to_string(n) +
                             " blocks is past the grid's 2^31 - 1");
  return dim3(static_cast<unsigned>(n));
}

// A launch's grid, block and dynamic shared memory in bytes.
struct Shape {
  dim3 grid, block;
  size_t shared = 0;
};

__device__ inline float warp_sum(float v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}
__device__ inline float warp_max(float v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

}  // namespace loom::cuda
