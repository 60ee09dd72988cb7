#include "config/section.hpp"

#include <sstream>

#include "config/config.hpp"

namespace loom::config {

Section Config::section(std::string name) const { return Section(*this, std::move(name)); }

Section Section::sub(std::string_view table) const { return Section(*cfg_, path(table)); }

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
  const toml::node* here = cfg_->table().at_path(name_).node();
  if (!here || !here->is_table()) return "[" + name_ + "]\n";
  // Rebuilt under its dotted name, so that the text's headers read [model.moe], not [moe].
  toml::table root;
  toml::table* at = &root;
  std::string_view rest = name_;
  for (size_t dot = rest.find('.'); dot != std::string_view::npos; dot = rest.find('.')) {
    at = at->emplace<toml::table>(rest.substr(0, dot)).first->second.as_table();
    rest.remove_prefix(dot + 1);
  }
  at->insert(rest, *here->as_table());
  std::ostringstream os;
  os << root;
  return os.str() + "\n";
}

}  // namespace loom::config
