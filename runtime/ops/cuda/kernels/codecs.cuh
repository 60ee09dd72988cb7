// The wire codecs: what ddp and zero send narrower than fp32, encoded and decoded where
// the buffers live. Each mirrors runtime/ops/cpu/codecs.cpp bit for bit (tests/kernels holds
// them equal):
//
//   bf16:  the upper half of the fp32 pattern, rounded to nearest-even (reductions.cuh's
//          round_bf16); widening is exact.
//   E4M3 block j of a wire (loom/formats.hpp): c_j = clamp(count - j w, 0, w) values x_i,
//          amax = max |x_i| (NaN ignored), s = min(448 / amax, FLT_MAX) (1 when amax is 0 or
//          inf), then the 4 bytes of s and w codes: code(round_e4m3(x_i s)) for i < c_j, 0 past
//          it. Decoding gives code_value / s.
//
// Encoding folds each wire block's amax in chunks over the whole grid, then writes the scales,
// then one code per thread; decoding is one thread per value. With LOOM_BLOCKS_SUM a thread folds
// its element over every block in block order, as the CPU loop does, so the sum's rounding is the
// same.
#pragma once

#include <loom/ops.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "ops/cuda/device.cuh"
#include "ops/cuda/kernels/reductions.cuh"

namespace loom::cuda::codecs {

// 2^k for an fp32 normal exponent k, built in the exponent bits (exact).
__device__ inline float pow2(int k) {
  return __uint_as_float(static_cast<unsigned>(k + 127) << 23);
}

// The E4M3 code of a value already on E4M3's grid (sign | 4 exponent bits | 3 mantissa bits):
// NaN is 0x7f, -0 keeps its sign, a subnormal |r| = man 2^-9.
__device__ inline unsigned char e4m3_code(float r) {
  if (isnan(r)) return 0x7f;
  const unsigned bits = __float_as_uint(r);
  const unsigned sign = (bits >> 24) & 0x80u;
  const unsigned abs_bits = bits & 0x7fffffffu;
  if (abs_bits == 0) return static_cast<unsigned char>(sign);
  const int e = static_cast<int>(abs_bits >> 23) - 127;
  if (e < -6)
    return static_cast<unsigned char>(sign |
                                      static_cast<unsigned>(__uint_as_float(abs_bits) * pow2(9)));
  return static_cast<unsigned char>(sign | (static_cast<unsigned>(e + 7) << 3) |
                                    ((abs_bits >> 20) & 7u));
}

// The value of an E4M3 code: S.1111.111 is NaN; exponent 0 is subnormal, man 2^-9.
__device__ inline float e4m3_value(unsigned char code) {
  const int exp = (code >> 3) & 15, man = code & 7;
  const float sign = (code & 0x80) ? -1.f : 1.f;
  if (exp == 15 && man == 7) return __int_as_float(0x7fc00000);
  if (exp == 0) return sign * (static_cast<float>(man) * pow2(-9));
  return sign * ((1.f + static_cast<float>(man) / 8.f) * pow2(exp - 7));
}

// A block's scale, stored as its 4 bytes in memory order (a wire block need not be aligned).
__device__ inline void put_scale(unsigned char* at, float s) {
  const unsigned u = __float_as_uint(s);
  at[0] = u & 0xffu, at[1] = (u >> 8) & 0xffu, at[2] = (u >> 16) & 0xffu, at[3] = u >> 24;
}
__device__ inline float get_scale(const unsigned char* at) {
  return __uint_as_float(static_cast<unsigned>(at[0]) | (static_cast<unsigned>(at[1]) << 8) |
                         (static_cast<unsigned>(at[2]) << 16) |
                         (static_cast<unsigned>(at[3]) << 24));
}

// Value i of a wire block: code_value / scale; a NaN code gives the CPU's NaN (0x7fc00000), not
// the quotient, whose bits a GPU may canonicalise otherwise.
__device__ inline float decoded(const unsigned char* block, int64_t i) {
  const float c = e4m3_value(block[4 + i]);
  return isnan(c) ? c : c / get_scale(block);
}

__device__ inline int64_t block_count(int64_t count, int64_t width, int64_t j) {
  const int64_t c = count - j * width;
  return c < 0 ? 0 : c > width ? width : c;
}

// dst[i] = bf16(src[i])
__global__ void to_bf16_k(uint16_t* dst, const float* src, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) dst[i] = static_cast<uint16_t>(__float_as_uint(reductions::round_bf16(src[i])) >> 16);
}
// dst[i] = the fp32 whose upper half is src[i]
__global__ void from_bf16_k(float* dst, const uint16_t* src, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) dst[i] = __uint_as_float(static_cast<unsigned>(src[i]) << 16);
}

// partial[j chunks + c] = max |x| over chunk c of wire block j's values (grid: chunks x blocks),
// as bits: for non-negative floats the bits order as the values. A NaN is skipped, as fmax skips
// it.
__global__ void block_amax_k(unsigned* partial, const float* src, int64_t count, int64_t width,
                             int64_t chunk) {
  LOOM_SHARED(unsigned, part, kBlock);
  const int64_t j = blockIdx.y, c = block_count(count, width, j), lo = blockIdx.x * chunk;
  const int64_t hi = lo + chunk < c ? lo + chunk : c;
  unsigned m = 0;
  for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
    const unsigned a = __float_as_uint(src[j * width + i]) & 0x7fffffffu;
    if (a <= 0x7f800000u && a > m) m = a;
  }
  m = reductions::fold_block(part, m, reductions::MaxU{});
  if (threadIdx.x == 0) partial[j * gridDim.x + blockIdx.x] = m;
}

// One thread per wire block: its scale s = 448 / amax from the partials (1 when amax is 0 or
// inf; at most FLT_MAX, so a block of values below 448 / FLT_MAX stays finite), written as the
// block's first 4 bytes and kept for the codes.
__global__ void block_scale_k(unsigned char* dst, float* scales, const unsigned* partial,
                              int64_t chunks, int64_t width, int64_t blocks) {
  const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (j >= blocks) return;
  unsigned m = 0;
  for (int64_t c = 0; c < chunks; ++c)
    m = partial[j * chunks + c] > m ? partial[j * chunks + c] : m;
  const float amax = __uint_as_float(m);
  const float s = amax > 0.f && isfinite(amax) ? fminf(448.f / amax, 3.40282347e38f) : 1.f;
  scales[j] = s;
  put_scale(dst + j * (4 + width), s);
}

// One thread per code: code(round_e4m3(x s_j)) for block j's values, 0 past them. f: E4M3's grid
// (reductions::narrow_format, passed in: it is host code).
__global__ void encode_codes_k(unsigned char* dst, const float* src, const float* scales,
                               int64_t count, int64_t width, int64_t blocks,
                               reductions::NarrowFormat f) {
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t >= width * blocks) return;
  const int64_t j = t / width, i = t % width;
  bool clipped = false;
  dst[j * (4 + width) + 4 + i] =
      i < block_count(count, width, j)
          ? e4m3_code(reductions::cast_grid(f, src[t] * scales[j], &clipped))
          : 0;
}

// One thread per (block, value): dst[j width + i] = (dst[...] +) value / scale.
__global__ void decode_blocks_k(float* dst, const unsigned char* src, int64_t count, int64_t width,
                                int64_t blocks, bool add) {
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t >= width * blocks) return;
  const int64_t j = t / width, i = t % width;
  if (i >= block_count(count, width, j)) return;
  const unsigned char* in = src + j * (4 + width);
  const float v = decoded(in, i);
  dst[t] = add ? dst[t] + v : v;
}

// One thread per value: dst[i] = (dst[i] +) b_0[i] + b_1[i] + ..., in block order.
__global__ void sum_blocks_k(float* dst, const unsigned char* src, int64_t count, int64_t width,
                             int64_t blocks, bool add) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= count) return;
  float acc = 0.f;
  for (int64_t j = 0; j < blocks; ++j) {
    const unsigned char* in = src + j * (4 + width);
    const float v = decoded(in, i);
    acc = j == 0 ? (add ? dst[i] + v : v) : acc + v;
  }
  if (blocks > 0) dst[i] = acc;
}

// ---- launch sequences ----

template <class Go>
void to_bf16(Go& go, uint16_t* dst, const float* src, int64_t n) {
  if (n > 0) go(LOOM_KERNEL(to_bf16_k), Shape{grid_of(blocks_for(n)), dim3(kBlock)}, dst, src, n);
}
template <class Go>
void from_bf16(Go& go, float* dst, const uint16_t* src, int64_t n) {
  if (n > 0) go(LOOM_KERNEL(from_bf16_k), Shape{grid_of(blocks_for(n)), dim3(kBlock)}, dst, src, n);
}
// Three launches: every wire block's amax in chunks over the whole grid, the scales, the codes.
template <class Go>
void encode_blocks(Go& go, uint8_t* dst, const float* src, int64_t count, int64_t width,
                   int64_t blocks) {
  if (blocks <= 0) return;
  if (blocks > 65535)
    throw std::runtime_error("encode_blocks: " + std::to_string(blocks) +
                             " wire blocks is past 65535");
  constexpr int64_t kChunk = 8 * kBlock;
  const int64_t chunks = width > kChunk ? (width + kChunk - 1) / kChunk : 1;
  unsigned* partial = go.template workspace<unsigned>(chunks * blocks);
  float* scales = go.template workspace<float>(blocks);
  auto* out = reinterpret_cast<unsigned char*>(dst);
  go(LOOM_KERNEL(block_amax_k),
     Shape{dim3(static_cast<unsigned>(chunks), static_cast<unsigned>(blocks)), dim3(kBlock)},
     partial, src, count, width, kChunk);
  go(LOOM_KERNEL(block_scale_k), Shape{grid_of(blocks_for(blocks)), dim3(kBlock)}, out, scales,
     static_cast<const unsigned*>(partial), chunks, width, blocks);
  if (width > 0)
    go(LOOM_KERNEL(encode_codes_k), Shape{grid_of(blocks_for(width * blocks)), dim3(kBlock)}, out,
       src, static_cast<const float*>(scales), count, width, blocks,
       reductions::narrow_format(LOOM_FP8_E4M3));
}
template <class Go>
void decode_blocks(Go& go, float* dst, const uint8_t* src, int64_t count, int64_t width,
                   int64_t blocks, int32_t flags) {
  const auto* in = reinterpret_cast<const unsigned char*>(src);
  const bool add = flags & LOOM_BLOCKS_ADD;
  if (flags & LOOM_BLOCKS_SUM) {
    const int64_t n = count < width ? count : width;
    if (n > 0 && blocks > 0)
      go(LOOM_KERNEL(sum_blocks_k), Shape{grid_of(blocks_for(n)), dim3(kBlock)}, dst, in, n, width,
         blocks, add);
  } else if (width * blocks > 0) {
    go(LOOM_KERNEL(decode_blocks_k), Shape{grid_of(blocks_for(width * blocks)), dim3(kBlock)}, dst,
       in, count, width, blocks, add);
  }
}

}  // namespace loom::cuda::codecs
