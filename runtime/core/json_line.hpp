// One JSON value on one line, as the CLI prints its --json rows: built with nlohmann's ordered
// objects (keys stay in the order they were set), written with a space after each separator and
// numbers as json_number writes them ({"layout": "dp4 mb1", "dp": 4, "mfu": 0.41}).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/json.hpp"

namespace loom {

inline std::string json_line(const nlohmann::ordered_json& v) {
  switch (v.type()) {
    case nlohmann::ordered_json::value_t::object: {
      std::string s = "{";
      for (auto it = v.begin(); it != v.end(); ++it)
        s += (it == v.begin() ? "" : ", ") + json_quote(it.key()) + ": " + json_line(it.value());
      return s + "}";
    }
    case nlohmann::ordered_json::value_t::array: {
      std::string s = "[";
      for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + json_line(v[i]);
      return s + "]";
    }
    case nlohmann::ordered_json::value_t::string:
      return json_quote(v.get_ref<const std::string&>());
    case nlohmann::ordered_json::value_t::number_float:
      return json_number(v.get<double>());
    default:
      return v.dump();  // integers, booleans, null
  }
}

}  // namespace loom
