// One section of a validated Config: what a component's read function receives, so that it reads
// its own keys and no other section's. Keys are relative to the section ("steps" in [train]).
#pragma once

#include <toml++/toml.h>

#include <string>
#include <string_view>
#include <vector>

namespace loom::config {

class Config;

class Section {
 public:
  Section(const Config& cfg, std::string name) : cfg_(&cfg), name_(std::move(name)) {}

  const std::string& name() const { return name_; }  // "train"; a key may be "moe.experts"

  // Typed reads of validated keys, as Config's.
  int64_t i64(std::string_view key) const;
  double f64(std::string_view key) const;
  bool boolean(std::string_view key) const;
  std::string str(std::string_view key) const;
  std::vector<std::string> str_list(std::string_view key) const;
  // The key's node, for a value of more than one type; nullptr when the key is absent.
  const toml::node* node(std::string_view key) const;
  // The section as TOML text, its header and the tables inside it included: for a part that
  // hands tables on by name (plugins' option tables).
  std::string toml() const;

 private:
  std::string path(std::string_view key) const { return name_ + "." + std::string(key); }

  const Config* cfg_;
  std::string name_;
};

}  // namespace loom::config
