#include "config/config.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/errors.hpp"
#include "core/nearest.hpp"

namespace loom::config {

namespace {

constexpr std::string_view kSetPrefix = "--set ";

std::string location(const toml::source_region& r) {
  std::string path = r.path ? *r.path : std::string("<input>");
  if (path.rfind(kSetPrefix, 0) == 0) return path;
  return path + ":" + std::to_string(r.begin.line) + ":" + std::to_string(r.begin.column);
}

// Where a key was written: its own position in the file, or, for a key --set added (toml++ gives
// it no position), the --set argument, which its value (or a new section's first value) carries.
std::string key_location(const toml::key& key, const toml::node& value) {
  if (key.source().path) return location(key.source());
  if (value.source().path) return location(value.source());
  if (const toml::table* t = value.as_table())
    for (auto&& [k, v] : *t)
      if (std::string l = key_location(k, v); l.rfind(kSetPrefix, 0) == 0) return l;
  return location(key.source());
}

std::string describe(const toml::node& n) {
  std::ostringstream os;
  os << n.type();
  if (n.is_value()) {
    os << " ";
    n.visit([&](auto&& v) { os << v; });
  }
  return os.str();
}

// Parses a TOML value literal; `origin` names where it came from in error messages.
toml::table parse_assignment(const std::string& key, const std::string& literal,
                             const std::string& origin) {
  try {
    return toml::parse(key + " = " + literal, origin);
  } catch (const toml::parse_error&) {
    return {};
  }
}

// Digits with a sign, a point, an exponent or underscores: what a user means as a number.
bool looks_numeric(const std::string& s) {
  const size_t first = s.find_first_not_of("+-");
  if (first == std::string::npos || !std::isdigit(static_cast<unsigned char>(s[first])))
    return false;
  return s.find_first_not_of("0123456789+-._eE") == std::string::npos;
}

bool fits_type(const toml::node& n, ValueType t) {
  switch (t) {
    case ValueType::Int:
      return n.is_integer();
    case ValueType::Float:
      return n.is_floating_point() || n.is_integer();
    case ValueType::Bool:
      return n.is_boolean();
    case ValueType::String:
      return n.is_string();
    case ValueType::IntOrAuto:
      return n.is_integer() || (n.is_string() && n.value<std::string>() == "auto");
    case ValueType::StringList: {
      const toml::array* a = n.as_array();
      if (!a) return false;
      for (const auto& e : *a)
        if (!e.is_string()) return false;
      return true;
    }
    case ValueType::FloatList: {
      const toml::array* a = n.as_array();
      if (!a) return false;
      for (const auto& e : *a)
        if (!e.is_floating_point() && !e.is_integer()) return false;
      return true;
    }
  }
  return false;
}

// A bound as the key's type writes it: 1000000 for an integer key, not 1e+06.
std::string bound_text(const KeySpec& k, double v) {
  if (k.type == ValueType::Int || k.type == ValueType::IntOrAuto)
    return std::to_string(static_cast<int64_t>(v));
  std::ostringstream os;
  os << v;
  return os.str();
}

std::string range_text(const KeySpec& k) {
  bool lo = std::isfinite(k.min), hi = std::isfinite(k.max);
  std::string out = type_name(k.type);
  if (lo && hi)
    out += " in [" + bound_text(k, k.min) + ", " + bound_text(k, k.max) + (k.below_max ? ")" : "]");
  else if (lo)
    out += " >= " + bound_text(k, k.min);
  else if (hi)
    out += " <= " + bound_text(k, k.max);
  return out;
}

void check_value(const toml::node& n, const std::string& label, const KeySpec& k) {
  std::string head = where(n) + ": " + label + " " + k.name + ": expected ";
  if (!fits_type(n, k.type)) throw ConfigError(head + type_name(k.type) + ", got " + describe(n));
  if (n.is_integer() || n.is_floating_point()) {
    // An integer past 2^53 has no exact double, and toml++ then gives none: take the nearest.
    const double v =
        n.is_integer() ? static_cast<double>(n.as_integer()->get()) : n.as_floating_point()->get();
    // NaN compares false with everything: refused by name, as are infinities.
    if (!std::isfinite(v))
      throw ConfigError(head + "a finite " + range_text(k) + ", got " + describe(n));
    if (v < k.min || v > k.max || (k.below_max && v >= k.max))
      throw ConfigError(head + range_text(k) + ", got " + describe(n));
  }
  if (const toml::array* a = n.as_array(); a && k.type == ValueType::FloatList)
    for (const auto& e : *a) {
      const double v = e.is_integer() ? static_cast<double>(e.as_integer()->get())
                                      : e.value<double>().value_or(NAN);
      if (!std::isfinite(v) || v < k.min || v > k.max)
        throw ConfigError(where(e) + ": " + label + " " + k.name + ": every element must be " +
                          range_text(k) + ", got " + describe(e));
    }
  if (n.is_string() && !k.choices.empty()) {
    std::string v = n.value<std::string>().value();
    bool ok = false;
    for (const auto& c : k.choices) ok = ok || c == v;
    if (!ok) {
      std::string list;
      for (const auto& c : k.choices) list += (list.empty() ? "\"" : ", \"") + c + "\"";
      throw ConfigError(head + "one of " + list + ", got \"" + v + "\"" +
                        did_you_mean(v, k.choices));
    }
  }
}

// Fills the keys a [section] leaves out from its named preset (the file always wins).
void apply_preset(toml::table& t, const SectionSpec& s) {
  const toml::node* name = t.get("preset");
  if (s.presets.empty() || !name || !name->is_string()) return;
  std::string wanted = name->value<std::string>().value();
  for (const auto& [preset, values] : s.presets) {
    if (preset != wanted) continue;
    for (const auto& [key, literal] : values) {
      // "moe.experts" fills [<section>.moe] experts.
      const size_t dot = key.find('.');
      toml::table* into = &t;
      std::string leaf = key;
      if (dot != std::string::npos) {
        const std::string sub = key.substr(0, dot);
        if (!t.contains(sub)) t.insert(sub, toml::table{});
        into = t.get_as<toml::table>(sub);
        leaf = key.substr(dot + 1);
        if (!into) continue;  // not a table: check_table reports it
      }
      if (!into->contains(leaf))
        into->insert(leaf, *parse_assignment(leaf, literal, "<preset>").get(leaf));
    }
  }
}

}  // namespace

std::string where(const toml::node& n) { return location(n.source()); }

// A section's table, dotted names ("model.moe") nested; created (empty) when absent.
toml::table& section_table(toml::table& root, const std::string& name) {
  toml::table* t = &root;
  size_t start = 0;
  while (true) {
    const size_t dot = name.find('.', start);
    const std::string part =
        name.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (!t->contains(part)) t->insert(part, toml::table{});
    toml::table* next = t->get_as<toml::table>(part);
    if (!next) throw ConfigError("[" + name.substr(0, dot) + "] must be a table");
    t = next;
    if (dot == std::string::npos) return *t;
    start = dot + 1;
  }
}

void check_table(toml::table& t, const std::string& label, const std::vector<KeySpec>& keys,
                 bool allows_subtables, const std::vector<std::string>& subsections) {
  std::vector<std::string> names = subsections;
  for (const auto& k : keys) names.push_back(k.name);
  for (auto&& [key, node] : t) {
    std::string name(key.str());
    const KeySpec* spec = nullptr;
    for (const auto& k : keys)
      if (k.name == name) spec = &k;
    if (!spec) {
      if (allows_subtables && node.is_table()) continue;
      const bool subsection =
          std::find(subsections.begin(), subsections.end(), name) != subsections.end();
      if (node.is_table() && subsection) continue;
      if (subsection)  // [model] moe = 5: the name is right, the shape is not
        throw ConfigError(key_location(key, node) + ": " + label + " " + name +
                          " must be a table ([" + label.substr(1, label.size() - 2) + "." + name +
                          "], or " + name + " = { ... }), got " + describe(node));
      throw ConfigError(key_location(key, node) + ": unknown key '" + name + "' in " + label +
                        did_you_mean(name, names));
    }
    check_value(node, label, *spec);
  }
  for (const auto& k : keys) {
    if (t.contains(k.name)) continue;
    toml::table parsed = parse_assignment(k.name, k.default_toml, "<default>");
    if (!parsed.contains(k.name))
      throw RuntimeError("bad default for " + label + " " + k.name + ": " + k.default_toml);
    t.insert(k.name, *parsed.get(k.name));
  }
}

// A directory opens as a stream here and reads as empty, and an empty file parses as an empty
// table: both would start a default run. A config says at least one thing.
Config Config::load(const std::filesystem::path& file, const std::vector<std::string>& sets) {
  std::error_code ec;
  if (std::filesystem::is_directory(file, ec))
    throw ConfigError("config '" + file.string() + "' is a directory, not a TOML file");
  std::ifstream in(file, std::ios::binary);
  if (!in)
    throw ConfigError("cannot read config file '" + file.string() + "': " + std::strerror(errno));
  std::stringstream text;
  text << in.rdbuf();
  const std::string s = text.str();
  if (s.find_first_not_of(" \t\r\n") == std::string::npos)
    throw ConfigError("config '" + file.string() + "' is empty: nothing says what to train");
  Config c = parse(s, file.string(), {});
  if (c.root_.empty())  // comments alone would train the default model without a word
    throw ConfigError("config '" + file.string() +
                      "' holds only comments: nothing says what to train");
  for (const auto& set : sets) c.apply_set(set);
  return c;
}

Config Config::parse(std::string_view text, const std::string& source_name,
                     const std::vector<std::string>& sets) {
  Config c;
  c.source_ = source_name;
  try {
    c.root_ = toml::parse(text, source_name);
  } catch (const toml::parse_error& e) {
    throw ConfigError(location(e.source()) + ": " + std::string(e.description()));
  }
  for (const auto& s : sets) c.apply_set(s);
  return c;
}

void Config::apply_set(const std::string& assignment) {
  size_t eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    throw UsageError("--set expects section.key=value, got '" + assignment + "'");
  std::string path = assignment.substr(0, eq), literal = assignment.substr(eq + 1);
  std::vector<std::string> parts;
  for (size_t start = 0;;) {
    size_t dot = path.find('.', start);
    parts.push_back(path.substr(start, dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  if (parts.size() < 2)
    throw UsageError("--set expects section.key=value, got '" + assignment + "'");
  std::string origin = std::string(kSetPrefix) + assignment;
  toml::table parsed = parse_assignment("v", literal, origin);
  if (!parsed.contains("v") &&
      looks_numeric(literal)) {  // 1e999, 2^64: a number out of range, not a string
    try {
      (void)toml::parse("v = " + literal, origin);  // parsed for its error only
    } catch (const toml::parse_error& e) {
      throw ConfigError(origin + ": " + std::string(e.description()));
    }
  }
  // Not a TOML literal: take the text as a string, as a shell user means.
  if (!parsed.contains("v")) {
    std::string quoted = "\"";
    for (char ch : literal) {
      if (ch == '"' || ch == '\\') quoted += '\\';
      quoted += ch;
    }
    parsed = parse_assignment("v", quoted + "\"", origin);
    if (!parsed.contains("v")) throw UsageError("--set: cannot read value in '" + assignment + "'");
  }
  toml::table* t = &root_;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    toml::node* child = t->get(parts[i]);
    if (!child) child = t->insert(parts[i], toml::table{}).first->second.as_table();
    if (!child->is_table())
      throw ConfigError(origin + ": '" + parts[i] + "' is a value, not a section");
    t = child->as_table();
  }
  t->insert_or_assign(parts.back(), std::move(*parsed.get("v")));
}

void Config::validate(const std::vector<SectionSpec>& schema) {
  std::vector<std::string> names;
  for (const auto& s : schema) names.push_back(s.name);
  for (auto&& [key, node] : root_) {
    std::string name(key.str());
    bool known = false;
    for (const auto& s : schema) known = known || s.name == name;
    if (!node.is_table())
      throw ConfigError(key_location(key, node) + ": key '" + name +
                        "' must be inside a section such as [run]");
    if (!known)
      throw ConfigError(key_location(key, node) + ": unknown section [" + name + "]" +
                        did_you_mean(name, names));
  }
  check_sections(schema);
}

void Config::check_sections(const std::vector<SectionSpec>& sections) {
  for (const auto& s : sections) {
    std::vector<std::string> children;  // [model.moe] is a subsection of [model]
    for (const auto& c : sections)
      if (c.name.size() > s.name.size() && c.name.rfind(s.name + ".", 0) == 0)
        children.push_back(c.name.substr(s.name.size() + 1));
    toml::table& t = section_table(root_, s.name);
    apply_preset(t, s);
    check_table(t, "[" + s.name + "]", s.keys, s.allows_subtables, children);
    auto same = [&](const SectionSpec& c) { return c.name == s.name; };
    if (std::find_if(checked_.begin(), checked_.end(), same) == checked_.end())
      checked_.push_back(s);
  }
}

void Config::validate_plugin_options(const std::string& plugin, const std::vector<KeySpec>& keys) {
  toml::table& plugins = *root_.get_as<toml::table>("plugins");
  if (!plugins.contains(plugin)) plugins.insert(plugin, toml::table{});
  check_table(*plugins.get_as<toml::table>(plugin),
              "plugin '" + plugin + "' [plugins." + plugin + "]", keys, false);
}

std::vector<std::string> Config::plugin_option_tables() const {
  std::vector<std::string> out;
  if (const toml::table* p = root_.get_as<toml::table>("plugins"))
    for (auto&& [key, node] : *p)
      if (node.is_table()) out.emplace_back(key.str());
  return out;
}

const toml::table* Config::plugin_table(const std::string& plugin) const {
  const toml::table* p = root_.get_as<toml::table>("plugins");
  return p ? p->get_as<toml::table>(plugin) : nullptr;
}

std::string Config::stem() const { return std::filesystem::path(source_).stem().string(); }

const toml::node& Config::at(std::string_view path) const {
  toml::node_view<const toml::node> v = root_.at_path(path);
  if (!v) throw RuntimeError("config key '" + std::string(path) + "' is not declared");
  return *v.node();
}

int64_t Config::i64(std::string_view path) const { return at(path).value<int64_t>().value(); }
double Config::f64(std::string_view path) const {
  const toml::node& n = at(path);
  return n.is_integer() ? static_cast<double>(n.as_integer()->get()) : n.value<double>().value();
}
bool Config::boolean(std::string_view path) const { return at(path).value<bool>().value(); }
std::string Config::str(std::string_view path) const {
  return at(path).value<std::string>().value();
}
std::vector<std::string> Config::str_list(std::string_view path) const {
  std::vector<std::string> out;
  for (const auto& e : *at(path).as_array()) out.push_back(e.value<std::string>().value());
  return out;
}

namespace {

void render_keys(std::ostringstream& os, const toml::table& t, const std::vector<KeySpec>& keys) {
  for (const auto& k : keys) {
    const toml::node* n = t.get(k.name);
    if (!n) continue;
    std::ostringstream value;
    n->visit([&](auto&& v) { value << v; });
    std::string line = k.name + " = " + value.str();
    if (line.size() < 34) line.resize(34, ' ');
    os << line << " # " << k.help << "\n";
  }
}

}  // namespace

std::string Config::render(
    const std::vector<std::pair<std::string, std::vector<KeySpec>>>& plugin_schemas) const {
  std::ostringstream os;
  os << "# resolved from " << source_ << "\n";
  for (const auto& s : checked_) {
    const toml::table* t = root_.at_path(s.name).as_table();
    if (!t) continue;
    os << "\n[" << s.name << "]  # " << s.help << "\n";
    render_keys(os, *t, s.keys);
  }
  for (const auto& [plugin, keys] : plugin_schemas) {
    const toml::table* t = plugin_table(plugin);
    if (!t || keys.empty()) continue;
    os << "\n[plugins." << plugin << "]\n";
    render_keys(os, *t, keys);
  }
  return os.str();
}

}  // namespace loom::config
