// Rotary position embedding, the CPU kernel's formula (runtime/ops/cpu/rope.cpp): one thread
// per (row, head, channel pair).
#pragma once

#include <cstdint>

#include "ops/cuda/device.cuh"

namespace loom::cuda::rope {

// x'[i] = x[i] cos - x[i+D/2] (sign sin), x'[i+D/2] = x[i+D/2] cos + x[i] (sign sin)
__global__ void rope_k(float* x, int64_t ld, int64_t rows, int64_t T, int64_t heads, int64_t D,
                       const float* cos, const float* sin, int64_t pos0, float sign) {
  const int64_t half = D / 2;
  const int64_t n = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (n >= rows * heads * half) return;
  const int64_t i = n % half, h = (n / half) % heads, row = n / (half * heads);
  const int64_t p = pos0 + row % T;
  float* lo = x + row * ld + h * D + i;
  float* hi = lo + half;
  const float c = cos[p * half + i], s = sign * sin[p * half + i], a = *lo, z = *hi;
  *lo = a * c - z * s;
  *hi = z * c + a * s;
}

// sign 1: forward; -1: the inverse rotation (backward).
template <class Go>
void run(Go& go, float* x, int64_t ld, int64_t B, int64_t T, int64_t heads, int64_t D,
         const float* cos, const float* sin, int64_t pos0, float sign) {
  const int64_t n = B * T * heads * (D / 2);
  if (n > 0)
    go(LOOM_KERNEL(rope_k), Shape{grid_of(blocks_for(n)), dim3(kBlock)}, x, ld, B * T, T, heads, D,
       cos, sin, pos0, sign);
}

}  // namespace loom::cuda::rope
