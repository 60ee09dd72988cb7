// The shards of one split, written as tokens arrive: <split>_NNNNNN.bin.tmp grows until it holds
// `shard_tokens` tokens, then gets its header and its name. Only a complete shard ever has a name
// a reader picks up, so a killed prepare leaves whole shards and at most one .tmp per split, and
// a resumed one continues the .tmp from the last point it recorded.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace loom::data {

class ShardWriter {
 public:
  // From scratch (complete = partial = 0: every earlier shard of the split is removed), or after
  // `complete` whole shards with `partial` tokens of the next one on disk.
  ShardWriter(std::filesystem::path dir, std::string split, int64_t vocab_size,
              int64_t shard_tokens, int64_t complete = 0, int64_t partial = 0);
  ~ShardWriter();
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  void append(const uint32_t* ids, size_t n);
  void sync();  // the partial shard's tokens written and on disk, so a resume point may count them
  void finish();  // the last shard, however short, gets its header and name

  int64_t complete() const { return complete_; }
  int64_t partial() const { return partial_; }
  int64_t tokens() const { return total_; }
  const std::vector<std::filesystem::path>& written() const { return written_; }

  // The token count at which `data prepare` kills itself (LOOM_PREPARE_KILL_AT_TOKEN, for the
  // resume tests); 0 = never.
  static int64_t kill_at_token();

 private:
  std::filesystem::path name(int64_t k) const;
  std::filesystem::path tmp(int64_t k) const;
  void restore();
  void open_next();
  void flush();
  void complete_shard();

  std::filesystem::path dir_;
  std::string split_;
  int width_;
  int64_t vocab_, shard_tokens_, complete_, partial_;
  int64_t
      total_;  // every shard's tokens: the last, once finished, may hold fewer than shard_tokens
  int fd_ = -1;
  std::vector<char> buf_;
  std::vector<std::filesystem::path> written_;
};

}  // namespace loom::data
