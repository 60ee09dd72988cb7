#include "data/data_settings.hpp"

namespace loom::data {

using config::kInf;
using config::ValueType;

config::SectionSpec data_section() {
  return {"data", "training and validation tokens", {
      {"dir", ValueType::String, "\"data/fortunes\"",
       "directory of llm.c token shards: *train*.bin and *val*.bin (loom data prepare)"},
      {"sampling", ValueType::String, "\"random\"", "random: windows anywhere, with replacement (llm.c); "
       "epoch: every window once per epoch, in a seeded order", -kInf, kInf, {"random", "epoch"}},
      {"tokenizer", ValueType::String, "\"\"", "tokenizer.json for text samples; \"\" = the one beside the shards, if any"},
  }};
}

DataSettings read_data(const config::Config& cfg) {
  return {cfg.str("data.dir"), cfg.str("data.sampling"), cfg.str("data.tokenizer")};
}

}  // namespace loom::data
