// What `loom train` and `loom config check` both refuse about a run's data before its first step,
// one function for both, so that they agree: a data directory that is not there, a tokenizer with
// more tokens than the model's vocabulary, a shard holding an id outside it.
#pragma once

#include <filesystem>

#include "train/job_settings.hpp"

namespace loom::train {

// Throws ConfigError naming the directory, the tokenizer or the shard and the position of the
// first bad id. Reads at most kDataCheckTokens of the train split, and of the val split where the
// run evaluates (a corpus of many gigabytes is checked from its start; the rest is checked as
// training reads it).
void check_data(const JobSettings& job);
inline constexpr int64_t kDataCheckTokens = int64_t(16) << 20;
// The [data] dir `loom plan --emit` writes for a cluster's config: refused until it is filled in.
inline constexpr const char* kDataPlaceholder = "FILL-IN: a directory of token shards";

// A tokenizer of `tokens` tokens read from `path` against [model] vocab_size.
void check_tokenizer_fits(int64_t tokens, const std::filesystem::path& path, int64_t vocab);

}  // namespace loom::train
