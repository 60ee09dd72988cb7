#include "data/data_settings.hpp"

#include <cmath>
#include <cstdio>

#include "config/config.hpp"
#include "core/errors.hpp"

namespace loom::data {

using config::kInf;
using config::ValueType;

config::SectionSpec data_section() {
  return {"data",
          "training and validation tokens",
          {
              {"dir", ValueType::String, "\"data/fortunes\"",
               "directory of llm.c token shards: *train*.bin and *val*.bin (loom data prepare); "
               "unread when blend is set"},
              {"blend", ValueType::StringList, "[]",
               "several such directories, each sample drawn from one by [data] weights "
               "(every layout the same); [] = dir alone"},
              {"weights", ValueType::FloatList, "[]",
               "one weight per blend directory; a source's share is its weight over their sum", 0,
               kInf},
              {"sampling",
               ValueType::String,
               "\"random\"",
               "random: windows anywhere, with replacement (llm.c); "
               "epoch: every window once per epoch, in a seeded order",
               -kInf,
               kInf,
               {"random", "epoch"}},
              {"tokenizer", ValueType::String, "\"\"",
               "tokenizer.json for text samples; \"\" = the one beside the shards, if any"},
          }};
}

DataSettings read_data(const config::Section& data) {
  DataSettings d{
      data.str("dir"), data.str("sampling"), data.str("tokenizer"), data.str_list("blend"), {}};
  const toml::node* w = data.node("weights");
  const std::string at = w ? config::where(*w) + ": " : "";
  if (const toml::array* a = w ? w->as_array() : nullptr)
    for (const toml::node& e : *a) d.weights.push_back(e.value<double>().value_or(0));
  if (d.weights.size() != d.blend.size())
    throw ConfigError(at + "[data] weights has " + std::to_string(d.weights.size()) +
                      " entries and [data] blend " + std::to_string(d.blend.size()) +
                      ": give one weight per blend directory");
  double sum = 0;
  for (double x : d.weights) sum += x;
  if (!d.blend.empty() && !(sum > 0 && std::isfinite(sum)))
    throw ConfigError(at +
                      "[data] weights must sum to a positive number (a source's share is its "
                      "weight over the sum)");
  return d;
}

std::filesystem::path DataSettings::tokenizer_path() const {
  if (!tokenizer.empty()) return tokenizer;
  const std::filesystem::path beside =
      std::filesystem::path(sources().front().dir) / "tokenizer.json";
  return std::filesystem::exists(beside) ? beside : std::filesystem::path();
}

std::vector<DataSettings::SourceDir> DataSettings::sources() const {
  if (blend.empty()) return {{dir, "", 1.0}};
  std::vector<SourceDir> out;
  for (size_t i = 0; i < blend.size(); ++i) {
    std::filesystem::path named = std::filesystem::path(blend[i]).lexically_normal();
    if (named.filename().empty()) named = named.parent_path();  // "data/web/"
    std::string name = named.filename().string();
    for (const SourceDir& o : out)
      if (o.name == name) name += "_" + std::to_string(i);  // two "train" folders stay apart
    out.push_back({blend[i], name, weights[i]});
  }
  return out;
}

std::string DataSettings::describe() const {
  if (blend.empty()) return dir;
  double sum = 0;
  for (double x : weights) sum += x;
  std::string out = "a blend of ";
  for (size_t i = 0; i < blend.size(); ++i) {
    char share[32];
    std::snprintf(share, sizeof share, " (%.1f%%)", 100 * weights[i] / sum);
    out += (i ? ", " : "") + blend[i] + share;
  }
  return out;
}

}  // namespace loom::data
