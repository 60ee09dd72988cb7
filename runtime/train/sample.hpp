// Text from the model, so a user sees it learn: top-k sampling of byte tokens.
#pragma once

#include <cstdint>
#include <string>

#include "gpt/gpt.hpp"

namespace loom::train {

// Continues `prompt` by `n_tokens` bytes. top_k = 1 is greedy. Deterministic for a given seed.
std::string generate(gpt::Gpt& model, const std::string& prompt, int64_t n_tokens, int64_t top_k,
                     uint64_t seed);

// The bytes made printable for a terminal: control bytes other than newline become '.'.
std::string printable(const std::string& bytes);

}  // namespace loom::train
