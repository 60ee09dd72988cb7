// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11): a
// counter-based generator. The value at counter c under key k is a pure function of (k, c), so
// element i of any parameter can be generated on its own — a shard of a tensor is bit-identical
// to the same slice of the unsharded tensor, whatever the parallel layout.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <string_view>

namespace loom {

inline std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> ctr,
                                          std::array<uint32_t, 2> key) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = static_cast<uint64_t>(kM0) * ctr[0];
    uint64_t p1 = static_cast<uint64_t>(kM1) * ctr[2];
    ctr = {static_cast<uint32_t>(p1 >> 32) ^ ctr[1] ^ key[0], static_cast<uint32_t>(p1),
           static_cast<uint32_t>(p0 >> 32) ^ ctr[3] ^ key[1], static_cast<uint32_t>(p0)};
    key[0] += kW0;
    key[1] += kW1;
  }
  return ctr;
}

// 64 bits of Philox at counter (a, b) under `key`: a seeded hash of two integers.
inline uint64_t philox64(uint64_t a, uint64_t b, uint64_t key) {
  const auto r = philox4x32({static_cast<uint32_t>(a), static_cast<uint32_t>(a >> 32),
                             static_cast<uint32_t>(b), static_cast<uint32_t>(b >> 32)},
                            {static_cast<uint32_t>(key), static_cast<uint32_t>(key >> 32)});
  return (static_cast<uint64_t>(r[0]) << 32) | r[1];
}

// FNV-1a, to turn a parameter name into part of the key.
inline uint32_t name_hash(std::string_view s) {
  uint32_t h = 2166136261u;
  for (unsigned char c : s) h = (h ^ c) * 16777619u;
  return h;
}

// A stream of numbers identified by (seed, name): uniform(i) and normal(i) are pure functions of i.
class CounterRng {
 public:
  CounterRng(uint64_t seed, std::string_view name)
      : key_{static_cast<uint32_t>(seed) ^ name_hash(name), static_cast<uint32_t>(seed >> 32)} {}

  // Uniform in (0, 1): 24 random bits, offset by half a step so 0 never occurs.
  float uniform(uint64_t i, int lane = 0) const {
    uint32_t r = draw(i)[lane];
    return (static_cast<float>(r >> 8) + 0.5f) * (1.f / 16777216.f);
  }

  // Standard normal by Box-Muller on lanes 0 and 1 of counter i.
  float normal(uint64_t i) const {
    auto r = draw(i);
    double u1 = (static_cast<double>(r[0] >> 8) + 0.5) / 16777216.0;
    double u2 = (static_cast<double>(r[1] >> 8) + 0.5) / 16777216.0;
    return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
  }

  std::array<uint32_t, 4> draw(uint64_t i) const {
    return philox4x32({static_cast<uint32_t>(i), static_cast<uint32_t>(i >> 32), 0u, 0u}, key_);
  }

 private:
  std::array<uint32_t, 2> key_;
};

}  // namespace loom
