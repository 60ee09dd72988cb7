// Byte-level BPE, as GPT-2, Llama 3 and tiktoken use it. Text is split into pieces by a
// pre-tokenizer regex (PCRE2, Unicode), each piece's UTF-8 bytes start as one token per byte, and
// the merges apply in rank order, lowest first. Special tokens ("<|endoftext|>") are matched in
// the text before splitting. Reads and writes Hugging Face's tokenizer.json and reads tiktoken's
// rank files.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace loom::tok {

// GPT-2's split, and the one of cl100k / Llama 3 (numbers in groups of three, case-insensitive
// contractions, newlines kept apart).
extern const char* const kGpt2Pattern;
extern const char* const kLlama3Pattern;

class Tokenizer {
 public:
  // tokenizer.json of a byte-level BPE model; anything else (WordPiece, Unigram, a normalizer)
  // is refused naming the file and the key.
  static Tokenizer from_json_file(const std::filesystem::path& path);
  // A tiktoken rank file (base64 token, rank per line), with the Llama 3 pattern unless given.
  static Tokenizer from_tiktoken(const std::filesystem::path& path,
                                 const std::string& pattern = kLlama3Pattern,
                                 const std::vector<std::string>& specials = {});
  // Learns `vocab_size` tokens (256 bytes, merges, then `specials`) from the texts.
  static Tokenizer train(const std::vector<std::string>& texts, int64_t vocab_size,
                         const std::vector<std::string>& specials = {"<|endoftext|>"},
                         const std::string& pattern = kGpt2Pattern);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  std::vector<uint32_t> encode(std::string_view text) const;
  // The special tokens the file's post_processor puts before and after a text (Llama 3: BOS first),
  // as transformers' tokenizer(text) adds them.
  const std::vector<uint32_t>& prefix() const { return prefix_; }
  const std::vector<uint32_t>& suffix() const { return suffix_; }
  // The bytes of the ids, concatenated (special tokens as their text).
  std::string decode(const std::vector<int32_t>& ids) const;
  std::string token_bytes(uint32_t id) const;
  int64_t vocab_size() const { return static_cast<int64_t>(bytes_.size()); }
  // A special token's id, or -1.
  int64_t special(const std::string& content) const;
  void save_json(const std::filesystem::path& path) const;
  // Pieces remembered with their ids, those of up to kCachedPieceBytes (an entry then takes at
  // most ~256 bytes); the memory is dropped when full.
  static constexpr size_t kCachedPieceBytes = 48;
  void set_cache_limit(size_t entries) { cache_limit_ = entries; }

 private:
  Tokenizer();
  struct Regex;
  void add_merge(uint32_t left, uint32_t right, uint32_t merged);
  void finish(const std::string& pattern);
  void encode_piece(std::string_view piece, std::vector<uint32_t>& out) const;
  void encode_ordinary(std::string_view text, std::vector<uint32_t>& out) const;
  // Calls fn on each piece the pattern splits `text` (no special tokens in it) into.
  void for_each_piece(std::string_view text, const std::function<void(std::string_view)>& fn) const;

  std::vector<std::string> bytes_;                 // id -> raw bytes
  std::unordered_map<std::string, uint32_t> ids_;  // raw bytes -> id (ordinary tokens)
  std::unordered_map<uint64_t, std::pair<uint32_t, uint32_t>>
      merges_;  // (left, right) -> (rank, merged)
  std::vector<std::pair<std::string, uint32_t>> specials_;
  std::string pattern_;
  std::vector<uint32_t> prefix_, suffix_;
  std::string post_processor_;  // as read, JSON, so save_json keeps it
  bool ignore_merges_ = false, add_prefix_space_ = false;
  uint32_t byte_id_[256] = {};
  std::unique_ptr<Regex> regex_;
  mutable std::unordered_map<std::string, std::vector<uint32_t>> cache_;
  size_t cache_limit_ = size_t{1} << 20;
};

}  // namespace loom::tok
