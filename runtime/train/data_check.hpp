// What `loom train` and `loom config check` both refuse about a run's data before its first step,
// one function for both, so that they agree: a data directory that is not there, a tokenizer with
// more tokens than the model's vocabulary, a shard holding an id outside it.
#pragma once

#include <filesystem>

#include "config/config.hpp"

namespace loom::train {

// Throws ConfigError naming the directory, the tokenizer or the shard and the position of the
// first bad id. Reads at most kDataCheckTokens of each split (a corpus of many gigabytes is
// checked from its start; the rest is checked as training reads it).
void check_data(const config::Config& cfg);

// A tokenizer of `tokens` tokens read from `path` against [model] vocab_size.
void check_tokenizer_fits(int64_t tokens, const std::filesystem::path& path, int64_t vocab);
inline constexpr int64_t kDataCheckTokens = int64_t(64) << 20;

}  // namespace loom::train
