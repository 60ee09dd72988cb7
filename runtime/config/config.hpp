// A Loom configuration: one TOML file plus --set overrides, validated against the declared
// schemas and completed with every default, before anything runs.
#pragma once

#include <toml++/toml.h>

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "config/schema.hpp"

namespace loom::config {

class Section;

class Config {
 public:
  // Parses a file (errors carry file:line:column) and applies "section.key=value" overrides.
  static Config load(const std::filesystem::path& file, const std::vector<std::string>& sets = {});
  // The same from text; `source_name` stands in for the file name in messages.
  static Config parse(std::string_view text, const std::string& source_name,
                      const std::vector<std::string>& sets = {});

  // Checks the file against every section the program declares (the top-level command's
  // list): an unknown section is an error; each known one is checked and filled with its
  // defaults. Throws ConfigError.
  void validate(const std::vector<SectionSpec>& schema);
  // Checks and fills only these sections, leaving the others as they are: for a config that was
  // validated whole when it was written (a checkpoint's), read by a part that needs a few.
  void check_sections(const std::vector<SectionSpec>& sections);
  // Checks [plugins.<plugin>] against a plugin's schema and fills its defaults.
  void validate_plugin_options(const std::string& plugin, const std::vector<KeySpec>& keys);
  // Subtable names under [plugins] (one per plugin given options).
  std::vector<std::string> plugin_option_tables() const;

  const toml::table& table() const { return root_; }
  const toml::table* plugin_table(const std::string& plugin) const;
  const std::string& source() const { return source_; }
  std::string stem() const;  // "demo" for configs/demo.toml

  // One section, for the read function of the component that declares it (config/section.hpp,
  // which defines it: the view depends on the config, not the other way).
  Section section(std::string name) const;

  // Typed reads of validated keys, by "section.key".
  int64_t i64(std::string_view path) const;
  double f64(std::string_view path) const;
  bool boolean(std::string_view path) const;
  std::string str(std::string_view path) const;
  std::vector<std::string> str_list(std::string_view path) const;

  // The resolved configuration as TOML, in the order of the sections it was checked against,
  // each key with its help as a comment.
  // `plugin_schemas` gives the keys of each plugin table, for ordering and help.
  std::string render(
      const std::vector<std::pair<std::string, std::vector<KeySpec>>>& plugin_schemas = {}) const;

  // One "section.key=value" override, as --set gives it (also a rank's group settings).
  void apply_set(const std::string& assignment);

 private:
  const toml::node& at(std::string_view path) const;

  toml::table root_;
  std::string source_;
  std::vector<SectionSpec> checked_;  // the sections validate and check_sections went through
};

// Every value that differs between two configs in these sections, as "B differs from A in
// section.key: A -> B" (a key one side lacks reads "(unset)"), in the sections' order.
std::vector<std::string> differences(const Config& a, const Config& b,
                                     const std::vector<std::string>& sections);

// "file:line:col" of a node, or the --set assignment that produced it.
std::string where(const toml::node& n);

// Checks one table against its keys, filling defaults; `label` names it in messages
// ("[run]" or "plugin 'fp16' [plugins.fp16]").
void check_table(toml::table& t, const std::string& label, const std::vector<KeySpec>& keys,
                 bool allows_subtables, const std::vector<std::string>& subsections = {});

}  // namespace loom::config
