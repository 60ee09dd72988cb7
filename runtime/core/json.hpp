// Just enough JSON writing for machine-readable CLI output and metrics lines.
#pragma once

#include <cmath>
#include <cstdio>
#include <string>
#include <string_view>

namespace loom {

// A JSON string literal, quotes included.
inline std::string json_quote(std::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (c < 0x20) {
          static const char* hex = "0123456789abcdef";
          out += "\\u00";
          out += hex[c >> 4];
          out += hex[c & 15];
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

// A JSON number: null for inf and NaN (JSON has neither), integers without a fraction, else 9
// significant digits (enough to round-trip a float).
inline std::string json_number(double v) {
  char b[40];
  if (!std::isfinite(v))
    return "null";
  else if (v == std::floor(v) && std::fabs(v) < 1e15)
    std::snprintf(b, sizeof b, "%.0f", v);
  else
    std::snprintf(b, sizeof b, "%.9g", v);
  return b;
}

}  // namespace loom
