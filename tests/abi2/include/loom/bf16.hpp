// bf16 <-> fp32 for plugins that stage data in bf16 (communication buffers, reduced-precision
// gradients). bf16 is the upper half of an fp32 bit pattern; narrowing adds 0x7fff plus the
// lowest kept bit, which rounds the dropped half to nearest-even (a carry may reach infinity,
// as IEEE overflow does), and keeps a NaN a NaN by setting its quiet bit.
#pragma once

#include <cstdint>
#include <cstring>

namespace loom::sdk {

inline float bf16_to_f32(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// A select rather than a branch, so a loop over it vectorises (the CPU's casts run on it).
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (u >> 16) | 0x40u;
  return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

}  // namespace loom::sdk
