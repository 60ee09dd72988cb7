// ZeRO's bookkeeping records and wire dtypes: where a parameter's elements sit in a shard, and
// the dtypes a collective may carry, kept apart so the plugin reads as its algorithm.
#pragma once

#include <cstdint>
#include <loom/formats.hpp>
#include <loom/sdk.hpp>
#include <string>
#include <vector>

namespace loom_zero {

// A run of one parameter's elements inside this rank's shard.
struct Segment {
  int64_t shard_at, len;
  int32_t flags;
  int64_t param, begin;  // which parameter, from which of its elements
};

using loom::formats::block_bytes;

// Wire dtypes as the options name them.
enum class Wire { F32, BF16, FP8 };
inline Wire wire_of(const std::string& s) {
  return s == "bf16" ? Wire::BF16 : s == "fp8" ? Wire::FP8 : Wire::F32;
}
// Bytes per element on the wire (fp8's scale per block left out), and of n elements with it.
inline int64_t width_of(Wire w) { return w == Wire::F32 ? 4 : w == Wire::BF16 ? 2 : 1; }
inline int64_t wire_bytes(Wire w, int64_t n) {
  return w == Wire::FP8 ? block_bytes(n) : width_of(w) * n;
}

}  // namespace loom_zero
