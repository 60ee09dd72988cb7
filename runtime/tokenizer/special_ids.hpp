// The ids that start and end a text for a model, as transformers reads them:
// generation_config.json, then config.json (bos_token_id; eos_token_id, one id or a list: Llama 3
// Instruct stops at
// <|eot_id|> and <|end_of_text|>).
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

namespace loom::tok {

struct SpecialIds {
  int64_t bos = -1;          // -1: none
  std::vector<int64_t> eos;  // empty: none
};

// From the files in `dir` (either may be missing; a malformed one is an error naming it).
SpecialIds read_special_ids(const std::filesystem::path& dir);

}  // namespace loom::tok
