// Token shards in llm.c's format: a header of 256 int32 (magic, version, token count, the rest
// zero) followed by the tokens, uint16 (magic 20240520, version 1: GPT-2's) or uint32 (magic
// 20240801, version 7: llm.c's Llama 3 shards). Shards are read window by window with pread, so a
// rank's memory does not grow with the dataset.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace loom::data {

constexpr int32_t kShardMagic = 20240520, kShardVersion = 1;      // uint16 tokens
constexpr int32_t kShardMagic32 = 20240801, kShardVersion32 = 7;  // uint32 tokens
constexpr size_t kHeaderInts = 256;

// The header of a shard of `count` tokens, `width` bytes each.
std::array<int32_t, kHeaderInts> shard_header(int width, int64_t count);

// uint16 when every id of the vocabulary fits (vocab_size <= 65536), uint32 otherwise.
void write_shard(const std::filesystem::path& path, const std::vector<uint32_t>& tokens,
                 int64_t vocab_size);

// One shard, open for reading. The header and the file size are checked when it opens; each
// token is checked against the vocabulary when it is read, and a read that finds the file shorter
// than it was is an error naming the file.
class TokenShard {
 public:
  TokenShard(const std::filesystem::path& path, int64_t vocab_size);
  int64_t size() const { return count_; }
  int width() const { return width_; }  // bytes per token
  const std::filesystem::path& path() const { return path_; }
  // tokens [first, first + n) as int32; throws naming the file and position of an id outside
  // the vocabulary.
  void read(int64_t first, int64_t n, int32_t* out) const;

 private:
  std::filesystem::path path_;
  int64_t vocab_, count_ = 0;
  int width_ = 2;
  size_t bytes_ = 0;
  std::pair<uint64_t, uint64_t>
      inode_;  // (device, inode) when opened: a shard replaced by rename is refused
};

// The shards of one split of a data directory, in name order, as one stream of tokens.
class TokenSplit {
 public:
  TokenSplit() = default;
  // Files ending in .bin whose name has `split` ("train", "val") as a part between '_', '-' or
  // '.': "train_000000.bin" and llm.c's "fineweb_train_000001.bin" alike.
  TokenSplit(const std::filesystem::path& dir, const std::string& split, int64_t vocab_size);
  int64_t size() const { return total_; }
  bool empty() const { return total_ == 0; }
  const std::vector<std::unique_ptr<TokenShard>>& shards() const { return shards_; }
  // tokens [first, first + n) of the stream, across shard boundaries.
  void read(int64_t first, int64_t n, int32_t* out) const;
  std::vector<int32_t> all() const;  // the whole split (tests and small tools)

 private:
  std::vector<std::unique_ptr<TokenShard>> shards_;
  std::vector<int64_t> begin_;  // stream offset of each shard
  int64_t total_ = 0;
};

}  // namespace loom::data
