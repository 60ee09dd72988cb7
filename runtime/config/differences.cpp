#include <algorithm>
#include <iomanip>
#include <sstream>

#include "config/config.hpp"

namespace loom::config {

namespace {

std::string text_of(const toml::node* n) {
  if (!n) return "(unset)";
  std::ostringstream s;
  if (auto v = n->as_string())
    s << '"' << v->get() << '"';
  else if (auto f = n->as_floating_point())
    s << std::setprecision(12) << f->get();  // 0.003, not 0.0030000000000000001
  else
    n->visit([&](const auto& x) { s << x; });
  return s.str();
}

}  // namespace

std::vector<std::string> differences(const Config& a, const Config& b,
                                     const std::vector<std::string>& sections) {
  std::vector<std::string> out;
  auto diff = [&](const std::string& path) {
    const toml::node* x = a.table().at_path(path).node();
    const toml::node* y = b.table().at_path(path).node();
    if ((x && x->is_table()) || (y && y->is_table())) return;
    const std::string tx = text_of(x), ty = text_of(y);
    if (tx != ty) out.push_back("B differs from A in " + path + ": " + tx + " -> " + ty);
  };
  for (const std::string& section : sections) {
    std::vector<std::string> keys;
    for (const Config* cfg : {&a, &b})
      if (const toml::table* t = cfg->table()[section].as_table())
        for (const auto& [k, v] : *t)
          if (std::find(keys.begin(), keys.end(), std::string(k.str())) == keys.end())
            keys.push_back(std::string(k.str()));
    for (const auto& k : keys) diff(section + "." + k);
  }
  return out;
}

}  // namespace loom::config
