// CRC32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of every checkpoint file:
// one table lookup per byte, table built once.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace loom::ckpt {

inline uint32_t crc32c_table(const void* data, size_t n, uint32_t crc = 0) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  const auto* p = static_cast<const uint8_t*>(data);
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

}  // namespace loom::ckpt

#if defined(__SSE4_2__)
#include <nmmintrin.h>

#include <cstring>
#endif

namespace loom::ckpt {

// The same checksum with SSE4.2's crc32 instruction, 8 bytes at a time (a checkpoint's worth of
// bytes in milliseconds rather than a few hundred); the table above where it is missing.
inline uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0) {
#if defined(__SSE4_2__)
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t c = ~crc;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    c = _mm_crc32_u64(c, w);
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  for (; n > 0; --n, ++p) c32 = _mm_crc32_u8(c32, *p);
  return ~c32;
#else
  return crc32c_table(data, n, crc);
#endif
}

}  // namespace loom::ckpt
