#include "tokenizer/special_ids.hpp"

#include <nlohmann/json.hpp>

#include "core/errors.hpp"
#include "core/files.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace loom::tok {

namespace {

// One id or a list of ids; anything else names the file and key.
std::vector<int64_t> ids_of(const json& v, const fs::path& file, const char* key) {
  const RuntimeError bad("'" + file.string() + "': \"" + key +
                         "\" must be a token id or a list of them, not " + v.dump());
  if (v.is_null()) return {};
  if (v.is_number_integer()) return {v.get<int64_t>()};
  if (!v.is_array()) throw bad;
  std::vector<int64_t> out;
  for (const json& id : v) {
    if (!id.is_number_integer()) throw bad;
    out.push_back(id.get<int64_t>());
  }
  return out;
}

}  // namespace

SpecialIds read_special_ids(const fs::path& dir) {
  SpecialIds s;
  bool have_bos = false, have_eos = false;
  for (const char* name : {"generation_config.json", "config.json"}) {
    const fs::path file = dir / name;
    if (!fs::is_regular_file(file)) continue;
    json j;
    try {
      j = json::parse(read_file(file, "model file"));
    } catch (const json::exception& e) {
      throw RuntimeError("'" + file.string() + "' is not JSON: " + e.what());
    }
    if (!have_bos && j.contains("bos_token_id")) {
      const std::vector<int64_t> bos = ids_of(j["bos_token_id"], file, "bos_token_id");
      s.bos = bos.empty() ? -1 : bos[0], have_bos = true;
    }
    if (!have_eos && j.contains("eos_token_id"))
      s.eos = ids_of(j["eos_token_id"], file, "eos_token_id"), have_eos = true;
  }
  return s;
}

}  // namespace loom::tok
