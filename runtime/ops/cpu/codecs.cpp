// The wire codecs: fp32 <-> bf16, and fp32 <-> E4M3 blocks with a scale each. The
// arithmetic is the SDK's own (loom/bf16.hpp, loom/formats.hpp), so these kernels write the bytes
// formats' encode_block writes, and a plugin may mix the two.
#include <loom/ops.h>

#include <algorithm>
#include <loom/bf16.hpp>
#include <loom/formats.hpp>

#include "ops/cpu/kernels.hpp"

namespace loom::cpu {

namespace {

// c_j = clamp(count - j width, 0, width): how many of block j's `width` slots hold values.
int64_t block_count(int64_t count, int64_t width, int64_t j) {
  return std::clamp<int64_t>(count - j * width, 0, width);
}

}  // namespace

void to_bf16(uint16_t* dst, const float* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = sdk::f32_to_bf16(src[i]);
}

void from_bf16(float* dst, const uint16_t* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = sdk::bf16_to_f32(src[i]);
}

void encode_blocks(uint8_t* dst, const float* src, int64_t count, int64_t width, int64_t blocks) {
  const int64_t stride = formats::block_bytes(width);
  for (int64_t j = 0; j < blocks; ++j)
    formats::encode_block(src + j * width, block_count(count, width, j), width, dst + j * stride);
}

void decode_blocks(float* dst, const uint8_t* src, int64_t count, int64_t width, int64_t blocks,
                   int32_t flags) {
  const int64_t stride = formats::block_bytes(width);
  const bool sum = flags & LOOM_BLOCKS_SUM, add = flags & LOOM_BLOCKS_ADD;
  for (int64_t j = 0; j < blocks; ++j) {
    if (sum)
      formats::decode_block(src + j * stride, std::min(count, width), dst, add || j > 0);
    else
      formats::decode_block(src + j * stride, block_count(count, width, j), dst + j * width, add);
  }
}

}  // namespace loom::cpu
