// Integers read from JSON that a damaged or hand-written file supplies (checkpoint manifests,
// safetensors headers, Hugging Face configs, tokenizers).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/errors.hpp"

namespace loom {

// nlohmann's get<T>() casts whatever number it finds: a fraction is truncated, a value past T's
// range wraps, and a float past it is undefined behaviour (the manifest fuzzer found 1e300 as a
// step). A file's integer is taken only when it is one exactly and T holds it; a float that is a
// whole number is accepted, as Python's json writes 4096.0 for some configs.
template <class T>
T json_integer(const nlohmann::json& v, std::string_view what) {
  static_assert(std::is_integral_v<T>);
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (std::in_range<T>(u)) return static_cast<T>(u);
  } else if (v.is_number_integer()) {
    const int64_t i = v.get<int64_t>();
    if (std::in_range<T>(i)) return static_cast<T>(i);
  } else if (v.is_number_float()) {
    const double d = v.get<double>();
    // 2^63 bounds what int64 holds; a NaN fails every comparison.
    if (d == std::trunc(d) && d >= -9223372036854775808.0 && d < 9223372036854775808.0 &&
        std::in_range<T>(static_cast<int64_t>(d)))
      return static_cast<T>(static_cast<int64_t>(d));
  }
  throw RuntimeError(std::string(what) + " is " + v.dump() + ", not an integer from " +
                     std::to_string(std::numeric_limits<T>::min()) + " to " +
                     std::to_string(std::numeric_limits<T>::max()));
}

// A JSON array of such integers.
template <class T>
std::vector<T> json_integers(const nlohmann::json& v, std::string_view what) {
  if (!v.is_array())
    throw RuntimeError(std::string(what) + " is " + v.dump() + ", not a list of integers");
  std::vector<T> out;
  out.reserve(v.size());
  for (const auto& x : v) out.push_back(json_integer<T>(x, what));
  return out;
}

}  // namespace loom
