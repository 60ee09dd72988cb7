#include "config/section.hpp"

#include <sstream>

#include "config/config.hpp"

namespace loom::config {

Section Config::section(std::string name) const { return Section(*this, std::move(name)); }

int64_t Section::i64(std::string_view key) const { return cfg_->i64(path(key)); }
double Section::f64(std::string_view key) const { return cfg_->f64(path(key)); }
bool Section::boolean(std::string_view key) const { return cfg_->boolean(path(key)); }
std::string Section::str(std::string_view key) const { return cfg_->str(path(key)); }
std::vector<std::string> Section::str_list(std::string_view key) const {
  return cfg_->str_list(path(key));
}
const toml::node* Section::node(std::string_view key) const {
  return cfg_->table().at_path(path(key)).node();
}

std::string Section::toml() const {
  const toml::table* here = cfg_->table()[name_].as_table();
  if (!here) return "[" + name_ + "]\n";
  toml::table root;
  root.insert(name_, *here);
  std::ostringstream os;
  os << root;
  return os.str() + "\n";
}

}  // namespace loom::config
