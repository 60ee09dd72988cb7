// Declared schemas: how a section, its keys (type, default, help) and a plugin's options are
// described. Validation, `loom config show` and `loom plugins info` all read these tables, so a
// key exists exactly when a component declares it in its section (train::job_sections() gathers
// them) or a plugin in its loom_option_spec list.
#pragma once

#include <loom/plugin.h>

#include <limits>
#include <string>
#include <vector>

namespace loom::config {

enum class ValueType { Int, Float, Bool, String, StringList, IntOrAuto, FloatList };
// An open end of a key's range.
inline constexpr double kInf = std::numeric_limits<double>::infinity();

const char* type_name(ValueType t);

struct KeySpec {
  std::string name;
  ValueType type;
  std::string default_toml;  // a TOML value literal: 1, 0.5, true, "x", []
  std::string help;
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
  std::vector<std::string> choices;  // for strings; empty = any
  bool below_max = false;            // max itself is excluded (AdamW's betas < 1)
  bool required = false;             // a plugin option the user must set (its option rules)
};

struct SectionSpec {
  std::string name;
  std::string help;
  std::vector<KeySpec> keys;
  bool allows_subtables = false;  // [plugins] holds one subtable per plugin
  // Named bundles of values (key "preset"): a preset fills the keys the file leaves out, before
  // the defaults do.
  std::vector<std::pair<std::string, std::vector<std::pair<std::string, std::string>>>> presets;
};

// The [model] presets (runtime/config/model_presets.cpp), and their names with "" first.
const std::vector<std::pair<std::string, std::vector<std::pair<std::string, std::string>>>>&
model_presets();
std::vector<std::string> model_preset_names();

// A plugin's C option schema as KeySpecs (NULL schema = no options).
std::vector<KeySpec> plugin_keys(const loom_option_spec* options);
// The plugin's options with its option rules (ranges, choices, required) applied.
std::vector<KeySpec> plugin_keys(const loom_plugin* desc);

// The [plugins] keys that select a plugin for a slot, with the kind each must be.
struct SlotKey {
  const char* key;
  loom_kind kind;
  loom_slot slot;
};
const std::vector<SlotKey>& slot_keys();

}  // namespace loom::config
