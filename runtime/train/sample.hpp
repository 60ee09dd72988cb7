// Text from the model, so a user sees it learn: top-k sampling of byte tokens.
#pragma once

#include <cstdint>
#include <string>

#include "gpt/gpt.hpp"

namespace loom::train {

// Continues `prompt` by `n_tokens` bytes. top_k = 1 is greedy. Deterministic for a given seed.
// The context is padded on the right to a multiple of `row_multiple` (sequence parallelism splits
// rows); causal attention keeps the padding from touching the positions that are read.
std::string generate(gpt::Gpt& model, const std::string& prompt, int64_t n_tokens, int64_t top_k,
                     uint64_t seed, int64_t row_multiple = 1);

// The bytes made printable for a terminal: control bytes other than newline become '.'.
std::string printable(const std::string& bytes);

}  // namespace loom::train
