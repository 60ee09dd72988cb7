// Token shards in llm.c's format: a header of 256 int32 (magic 20240520, version 1, token
// count, the rest zero) followed by the tokens as uint16. File size = 1024 + 2 * count.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace loom::data {

constexpr int32_t kShardMagic = 20240520;
constexpr int32_t kShardVersion = 1;
constexpr size_t kHeaderInts = 256;

void write_shard(const std::filesystem::path& path, const std::vector<uint16_t>& tokens);

// Reads and validates one shard: magic, version, size, and every token < vocab_size.
// Throws RuntimeError naming the file and what is wrong.
std::vector<uint16_t> read_shard(const std::filesystem::path& path, int64_t vocab_size);

// Every "<split>_*.bin" shard in `dir`, in name order, concatenated.
std::vector<uint16_t> read_split(const std::filesystem::path& dir, const std::string& split,
                                 int64_t vocab_size);

struct PrepareReport {
  int64_t train_tokens = 0, val_tokens = 0;
  std::vector<std::filesystem::path> written;
};

// Byte-level tokenisation of text files: each file's last `val_fraction` goes to the validation
// split, the rest to training; shards hold at most `shard_tokens` tokens.
PrepareReport prepare_text(const std::vector<std::filesystem::path>& inputs,
                           const std::filesystem::path& out_dir, double val_fraction,
                           int64_t shard_tokens = 100'000'000);

}  // namespace loom::data
