// Column sums without atomics, for parameter gradients summed over rows (norm weights, biases):
//   out[c] += sum_r f(r, c),  r < N, c < C.
// Two launches, each with a fixed order, so the result does not depend on scheduling:
//   1. the rows are cut into at most kChunks chunks; a block of 32 columns x 8 row lanes sums
//      chunk y: lane (x, ry) adds rows ry, ry + 8, ... of the chunk for column 32 blockIdx.x + x
//      (consecutive threads read consecutive columns), then the 8 row lanes fold through shared
//      memory, row lane 0 first;
//   2. one thread per column adds the chunks' partial sums in chunk order.
// f is a functor with `float operator()(int64_t r, int64_t c) const`.
#pragma once

#include "ops/cuda/device.cuh"

namespace loom::cuda::columns {

constexpr int kCols = 32, kRowLanes = 8, kChunks = 64;

template <class F>
__global__ void column_sums_k(float* partial, F f, int64_t N, int64_t C, int64_t rows_per_chunk) {
  LOOM_SHARED(float, part, kRowLanes* kCols);
  const int x = threadIdx.x, ry = threadIdx.y;
  const int64_t c = int64_t(blockIdx.x) * kCols + x, r0 = int64_t(blockIdx.y) * rows_per_chunk;
  const int64_t r1 = r0 + rows_per_chunk < N ? r0 + rows_per_chunk : N;
  float s = 0.f;
  if (c < C)
    for (int64_t r = r0 + ry; r < r1; r += kRowLanes) s += f(r, c);
  part[ry * kCols + x] = s;
  __syncthreads();
  if (ry != 0 || c >= C) return;
  float t = 0.f;
  for (int k = 0; k < kRowLanes; ++k) t += part[k * kCols + x];
  partial[int64_t(blockIdx.y) * C + c] = t;
}

template <class = void>  // a template, so every file including this header may hold it
__global__ void fold_columns_k(float* out, const float* partial, int64_t chunks, int64_t C) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= C) return;
  float s = 0.f;
  for (int64_t g = 0; g < chunks; ++g) s += partial[g * C + c];
  out[c] += s;
}

template <class Go, class F>
void add_sums(Go& go, float* out, F f, int64_t N, int64_t C) {
  if (N <= 0 || C <= 0) return;
  const int64_t per = (N + kChunks - 1) / kChunks;
  const int64_t rows = per > kRowLanes ? per : kRowLanes, chunks = (N + rows - 1) / rows;
  float* partial = go.template workspace<float>(chunks * C);
  go(LOOM_KERNEL(column_sums_k<F>),
     Shape{dim3(static_cast<unsigned>(blocks_for(C, kCols)), static_cast<unsigned>(chunks)),
           dim3(kCols, kRowLanes)},
     partial, f, N, C, rows);
  go(LOOM_KERNEL(fold_columns_k<>), Shape{grid_of(blocks_for(C)), dim3(kBlock)}, out, partial,
     chunks, C);
}

// The terms the kernels sum.
struct Plain {  // dout[r, c]: a bias's gradient, LayerNorm's db
  const float* dout;
  int64_t C;
  __device__ float operator()(int64_t r, int64_t c) const { return dout[r * C + c]; }
};
struct Centered {  // dout[r, c] (x[r, c] - mean[r]) rstd[r]: LayerNorm's dw
  const float *dout, *x, *mean, *rstd;
  int64_t C;
  __device__ float operator()(int64_t r, int64_t c) const {
    return dout[r * C + c] * ((x[r * C + c] - mean[r]) * rstd[r]);
  }
};
struct Scaled {  // dout[r, c] x[r, c] rstd[r]: RMSNorm's dw
  const float *dout, *x, *rstd;
  int64_t C;
  __device__ float operator()(int64_t r, int64_t c) const {
    return dout[r * C + c] * (x[r * C + c] * rstd[r]);
  }
};

}  // namespace loom::cuda::columns
