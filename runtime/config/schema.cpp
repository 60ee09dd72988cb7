#include "config/schema.hpp"

#include <algorithm>
#include <string_view>

#include "core/bar_list.hpp"
#include "core/errors.hpp"

namespace loom::config {

const char* type_name(ValueType t) {
  switch (t) {
    case ValueType::Int:
      return "integer";
    case ValueType::Float:
      return "float";
    case ValueType::Bool:
      return "boolean";
    case ValueType::String:
      return "string";
    case ValueType::StringList:
      return "array of strings";
    case ValueType::IntOrAuto:
      return "integer or \"auto\"";
    case ValueType::FloatList:
      return "array of numbers";
  }
  return "?";
}

// Each section is declared beside the code that reads it; this is only their order, as
// `loom config show` prints them.
std::vector<KeySpec> plugin_keys(const loom_option_spec* options) {
  std::vector<KeySpec> keys;
  for (const loom_option_spec* o = options; o && o->name; ++o) {
    ValueType t = ValueType::String;
    switch (o->type) {
      case LOOM_OPT_INT:
        t = ValueType::Int;
        break;
      case LOOM_OPT_FLOAT:
        t = ValueType::Float;
        break;
      case LOOM_OPT_BOOL:
        t = ValueType::Bool;
        break;
      default:
        t = ValueType::String;
        break;
    }
    keys.push_back({o->name, t, o->default_value ? o->default_value : "", o->help ? o->help : ""});
  }
  return keys;
}

std::vector<KeySpec> plugin_keys(const loom_plugin* d) {
  std::vector<KeySpec> keys = plugin_keys(d->options);
  for (const loom_option_rule* r = d->option_rules; r && r->name; ++r) {
    auto k =
        std::find_if(keys.begin(), keys.end(), [&](const KeySpec& s) { return s.name == r->name; });
    if (k == keys.end())
      throw RuntimeError("plugin '" + std::string(d->name) + "' has a rule for option '" + r->name +
                         "', which its schema does not declare");
    if (r->min <= r->max) k->min = r->min, k->max = r->max;
    for (std::string& c : split_bar_list(r->choices)) k->choices.push_back(std::move(c));
    k->required = r->required != 0;
  }
  return keys;
}

}  // namespace loom::config
