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

#ifdef __CUDACC__
#include <cuda_runtime.h>
#define LOOM_SHARED(T, name, n) __shared__ T name[n]
#define LOOM_DYNAMIC_SHARED(T, name) extern __shared__ T name[]
namespace loom::cuda {
template <class T>
using SharedPtr = T*;
}
#else
#include "ops/cuda/host/harness.hpp"
#endif

// A kernel and its name, for the launcher (the harness logs names; the coverage test reads them).
#define LOOM_KERNEL(k) #k, k

namespace loom::cuda {

constexpr int kBlock = 256;
constexpr int kWarp = 32;
constexpr unsigned kFullMask = 0xffffffffu;

inline unsigned blocks_for(int64_t n, int64_t per_block = kBlock) {
  return static_cast<unsigned>((n + per_block - 1) / per_block);
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

// A block of kBlock threads reduces v: warps by shuffles, then warp 0 over the warps' partials
// held in `part` (kBlock / kWarp floats); every thread gets the result. Op is a functor
// combining two values.
template <class Op>
__device__ float block_reduce(float v, Op op, SharedPtr<float> part) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  for (int o = kWarp / 2; o > 0; o /= 2) v = op(v, __shfl_xor_sync(kFullMask, v, o));
  if (lane == 0) part[warp] = v;
  __syncthreads();
  float r = part[0];
  for (int w = 1; w < kBlock / kWarp; ++w) r = op(r, static_cast<float>(part[w]));
  __syncthreads();  // part is free again when this returns
  return r;
}

struct Sum {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct Max {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

}  // namespace loom::cuda
