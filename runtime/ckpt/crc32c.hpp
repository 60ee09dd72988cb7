// CRC32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of every checkpoint file:
// one table lookup per byte, table built once.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace loom::ckpt {

inline uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0) {
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
