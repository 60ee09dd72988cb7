// Whole-array reductions returned to the host, without atomics: the sum of squares (in double)
// and quantize's statistics (amax, NaN count, clipped count). Each block reduces a grid-strided
// share through shared memory and writes one partial; one block then folds the partials in
// order, so the result does not depend on scheduling.
//
// quantize is the CPU kernel's arithmetic (ops/cpu/quantize.cpp; loom/formats.hpp has the
// table and the rounding rule), and must match it bit for bit.
#pragma once

#include <loom/types.h>

#include <cstdint>

#include "ops/cuda/device.cuh"

namespace loom::cuda::reductions {

constexpr unsigned kMaxBlocks = 1024;

// What quantize reports, in the workspace; the caller copies it back.
struct CastStats {
  float amax;
  unsigned long long nans, clips;
};

// Tree fold of one value per thread of a kBlock block; thread 0 ends with the total.
template <class T, class Op>
__device__ T fold_block(SharedPtr<T> part, T v, Op op) {
  part[threadIdx.x] = v;
  __syncthreads();
  for (unsigned w = kBlock / 2; w > 0; w /= 2) {
    if (threadIdx.x < w)
      part[threadIdx.x] =
          op(static_cast<T>(part[threadIdx.x]), static_cast<T>(part[threadIdx.x + w]));
    __syncthreads();
  }
  return part[0];
}
struct SumD {
  __device__ double operator()(double a, double b) const { return a + b; }
};
struct SumU {
  __device__ unsigned long long operator()(unsigned long long a, unsigned long long b) const {
    return a + b;
  }
};
struct MaxU {
  __device__ unsigned operator()(unsigned a, unsigned b) const { return a > b ? a : b; }
};

// partial[block] = sum x^2 over the block's share, in double
__global__ void sum_squares_k(double* partial, const float* x, int64_t n) {
  LOOM_SHARED(double, part, kBlock);
  double s = 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    s += static_cast<double>(x[i]) * x[i];
  s = fold_block(part, s, SumD{});
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

// out = sum of the partials, each thread a strided share, then folded
__global__ void fold_sum_k(double* out, const double* partial, int64_t count) {
  LOOM_SHARED(double, part, kBlock);
  double s = 0;
  for (int64_t i = threadIdx.x; i < count; i += kBlock) s += partial[i];
  s = fold_block(part, s, SumD{});
  if (threadIdx.x == 0) *out = s;
}

// Per block: max |x| over its share (|x| >= 0, so the order of the bits is the order of the
// values) and the count of NaNs.
__global__ void amax_k(unsigned* amax_part, unsigned long long* nan_part, const float* x,
                       int64_t n) {
  LOOM_SHARED(unsigned, top, kBlock);
  LOOM_SHARED(unsigned long long, nans, kBlock);
  unsigned m = 0;
  unsigned long long c = 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const unsigned a = __float_as_uint(x[i]) & 0x7fffffffu;
    if (a > 0x7f800000u)
      ++c;
    else
      m = a > m ? a : m;
  }
  m = fold_block(top, m, MaxU{});
  c = fold_block(nans, c, SumU{});
  if (threadIdx.x == 0) amax_part[blockIdx.x] = m, nan_part[blockIdx.x] = c;
}

// The narrow formats as (mantissa bits, smallest normal exponent, max, infinities, saturation).
struct NarrowFormat {
  int man, emin;
  float max;
  bool has_inf, saturates, bf16;
};

// bf16: the upper half of the fp32 pattern, rounded to nearest-even by adding 0x7fff plus the
// lowest kept bit (a carry may reach infinity, as IEEE overflow does); a NaN stays a NaN.
__device__ inline float round_bf16(float v) {
  unsigned u = __float_as_uint(v);
  if ((u & 0x7fffffffu) > 0x7f800000u) return __uint_as_float((u | 0x400000u) & 0xffff0000u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return __uint_as_float(u & 0xffff0000u);
}

// The other formats: |v| = m 2^e on the grid of spacing q = 2^(max(e, emin) - man), with q and
// 1/q built in the exponent bits (exact; clamped so 1/q stays normal, past max anyway), and
// rint(|v| / q) rounding to nearest-even. Finite overflow saturates or becomes inf: *clipped.
__device__ inline float cast_grid(const NarrowFormat f, float v, bool* clipped) {
  const unsigned abs_bits = __float_as_uint(v) & 0x7fffffffu;
  const float a = __uint_as_float(abs_bits);
  int eb = static_cast<int>(abs_bits >> 23);
  const int eb_min = f.emin + 127;
  eb = eb < eb_min ? eb_min : eb;
  eb = eb > 254 - f.man ? 254 - f.man : eb;
  const float inv_q = __uint_as_float(static_cast<unsigned>(254 - eb + f.man) << 23);
  const float q = __uint_as_float(static_cast<unsigned>(eb - f.man) << 23);
  float r = rintf(a * inv_q) * q;
  const bool finite = abs_bits < 0x7f800000u;
  if (finite && r > f.max) {
    *clipped = true;
    r = f.saturates ? f.max : INFINITY;
  }
  if (abs_bits == 0x7f800000u) r = f.has_inf ? INFINITY : __int_as_float(0x7fc00000);
  if (abs_bits > 0x7f800000u) return v;
  return copysignf(r, v);
}

// x = cast(x scale) (1 / scale); a finite x whose product overflows fp32 becomes +-FLT_MAX first,
// so the cast saturates or overflows it (and counts it) like any other large value.
// clip_part[block] = the block's clipped count.
__global__ void quantize_k(float* x, int64_t n, NarrowFormat f, float scale, float inv,
                           unsigned long long* clip_part) {
  LOOM_SHARED(unsigned long long, clips, kBlock);
  unsigned long long c = 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float v = x[i] * scale;
    if (isinf(v) && isfinite(x[i])) v = copysignf(3.402823466e38f, v);
    bool clipped = false;
    float r;
    if (f.bf16) {
      r = round_bf16(v);
      clipped = isfinite(v) && isinf(r);
    } else {
      r = cast_grid(f, v, &clipped);
    }
    c += clipped;
    x[i] = r * inv;
  }
  c = fold_block(clips, c, SumU{});
  if (threadIdx.x == 0) clip_part[blockIdx.x] = c;
}

// One block: the statistics from the partials (clip_part null: no cast ran).
__global__ void cast_stats_k(CastStats* out, const unsigned* amax_part,
                             const unsigned long long* nan_part,
                             const unsigned long long* clip_part, int64_t blocks) {
  if (threadIdx.x != 0) return;
  unsigned m = 0;
  unsigned long long nans = 0, clips = 0;
  for (int64_t b = 0; b < blocks; ++b) {
    m = amax_part[b] > m ? amax_part[b] : m;
    nans += nan_part[b];
    if (clip_part) clips += clip_part[b];
  }
  out->amax = __uint_as_float(m), out->nans = nans, out->clips = clips;
}

// ---- launch sequences ----

inline unsigned grid_for(int64_t n) {
  const int64_t b = blocks_for(n);
  return static_cast<unsigned>(b < kMaxBlocks ? (b > 0 ? b : 1) : kMaxBlocks);
}

// *out = sum x^2 (out is workspace or device memory)
template <class Go>
void sum_squares(Go& go, double* out, const float* x, int64_t n) {
  const unsigned blocks = grid_for(n);
  double* partial = go.template workspace<double>(blocks);
  go(LOOM_KERNEL(sum_squares_k), Shape{dim3(blocks), dim3(kBlock)}, partial, x, n);
  go(LOOM_KERNEL(fold_sum_k), Shape{dim3(1), dim3(kBlock)}, out,
     static_cast<const double*>(partial), static_cast<int64_t>(blocks));
}

// The device's view of a dtype's format: loom/formats.hpp's table, written again because that
// header needs C++20 and CUDA compiles as C++17 here (tests/kernels holds the two equal).
// man < 0: not a narrow format (statistics only).
inline NarrowFormat narrow_format(int32_t dtype) {
  switch (dtype) {
    case LOOM_BF16:
      return {7, -126, 3.38953139e38f, true, false, true};
    case LOOM_F16:
      return {10, -14, 65504.f, true, false, false};
    case LOOM_FP8_E4M3:
      return {3, -6, 448.f, false, true, false};
    case LOOM_FP8_E5M2:
      return {2, -14, 57344.f, true, true, false};
    default:
      return {-1, 0, 0.f, false, false, false};
  }
}

// Statistics of x (before the cast), then x = cast(x scale) / scale where f is a format.
template <class Go>
void quantize(Go& go, CastStats* out, float* x, int64_t n, NarrowFormat f, float scale) {
  const unsigned blocks = grid_for(n);
  unsigned* amax_part = go.template workspace<unsigned>(blocks);
  unsigned long long* nan_part = go.template workspace<unsigned long long>(blocks);
  unsigned long long* clip_part =
      f.man >= 0 ? go.template workspace<unsigned long long>(blocks) : nullptr;
  const Shape s{dim3(blocks), dim3(kBlock)};
  go(LOOM_KERNEL(amax_k), s, amax_part, nan_part, static_cast<const float*>(x), n);
  if (clip_part) go(LOOM_KERNEL(quantize_k), s, x, n, f, scale, 1.f / scale, clip_part);
  go(LOOM_KERNEL(cast_stats_k), Shape{dim3(1), dim3(kWarp)}, out,
     static_cast<const unsigned*>(amax_part), static_cast<const unsigned long long*>(nan_part),
     static_cast<const unsigned long long*>(clip_part), static_cast<int64_t>(blocks));
}

}  // namespace loom::cuda::reductions
