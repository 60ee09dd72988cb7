// The "a|b|c" lists of the plugin ABI (an option rule's choices, a plugin's services), split.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace loom {

// "a|b|c" -> {"a", "b", "c"}; NULL or "" -> {}.
inline std::vector<std::string> split_bar_list(const char* list) {
  std::vector<std::string> out;
  for (std::string_view s = list ? list : ""; !s.empty();) {
    const size_t bar = s.find('|');
    out.emplace_back(s.substr(0, bar));
    s = bar == std::string_view::npos ? std::string_view() : s.substr(bar + 1);
  }
  return out;
}

}  // namespace loom
