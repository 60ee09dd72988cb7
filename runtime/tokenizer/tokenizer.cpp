#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/tokenizer.hpp"

#include <pcre2.h>

#include <algorithm>
#include <limits>

#include "core/errors.hpp"

namespace loom::tok {

const char* const kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char* const kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// The compiled pre-tokenizer (JIT when PCRE2 has it) and one match block, reused.
struct Tokenizer::Regex {
  pcre2_code* code = nullptr;
  pcre2_match_data* match = nullptr;
  explicit Regex(const std::string& pattern) {
    int err = 0;
    PCRE2_SIZE at = 0;
    code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.c_str()), pattern.size(),
                         PCRE2_UTF | PCRE2_UCP, &err, &at, nullptr);
    if (!code) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      throw ConfigError("pre-tokenizer pattern at offset " + std::to_string(at) + ": " +
                        reinterpret_cast<char*>(msg));
    }
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter without JIT
    match = pcre2_match_data_create_from_pattern(code, nullptr);
  }
  ~Regex() {
    pcre2_match_data_free(match);
    pcre2_code_free(code);
  }
};

Tokenizer::Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

namespace {
uint64_t pair_key(uint32_t a, uint32_t b) { return (static_cast<uint64_t>(a) << 32) | b; }
}  // namespace

void Tokenizer::add_merge(uint32_t left, uint32_t right, uint32_t merged) {
  merges_.emplace(pair_key(left, right),
                  std::make_pair(static_cast<uint32_t>(merges_.size()), merged));
}

// After the vocabulary is in place: every byte must be a token, and the pattern compiles.
void Tokenizer::finish(const std::string& pattern) {
  for (int b = 0; b < 256; ++b) {
    auto it = ids_.find(std::string(1, static_cast<char>(b)));
    if (it == ids_.end())
      throw ConfigError("the vocabulary has no token for byte " + std::to_string(b) +
                        ": not a byte-level BPE");
    byte_id_[b] = it->second;
  }
  pattern_ = pattern;
  regex_ = std::make_unique<Regex>(pattern);
  // Longest special first, so one that contains another wins.
  std::sort(specials_.begin(), specials_.end(),
            [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
}

// Lowest-ranked adjacent pair first, every occurrence of it left to right, until no pair of
// adjacent tokens has a merge. (A token's own merges rank before any merge that uses it, so this
// is the order a priority queue of single merges would take.)
void Tokenizer::encode_piece(std::string_view piece, std::vector<uint32_t>& out) const {
  if (ignore_merges_) {
    auto whole = ids_.find(std::string(piece));
    if (whole != ids_.end()) return out.push_back(whole->second);
  }
  std::string key(piece);
  if (auto hit = cache_.find(key); hit != cache_.end()) {
    out.insert(out.end(), hit->second.begin(), hit->second.end());
    return;
  }
  std::vector<uint32_t> sym(piece.size());
  for (size_t i = 0; i < piece.size(); ++i) sym[i] = byte_id_[static_cast<unsigned char>(piece[i])];
  while (sym.size() > 1) {
    uint32_t best = std::numeric_limits<uint32_t>::max(), a = 0, b = 0, merged = 0;
    for (size_t i = 0; i + 1 < sym.size(); ++i) {
      auto m = merges_.find(pair_key(sym[i], sym[i + 1]));
      if (m != merges_.end() && m->second.first < best)
        best = m->second.first, a = sym[i], b = sym[i + 1], merged = m->second.second;
    }
    if (best == std::numeric_limits<uint32_t>::max()) break;
    size_t w = 0;
    for (size_t r = 0; r < sym.size(); ++w) {
      if (r + 1 < sym.size() && sym[r] == a && sym[r + 1] == b) {
        sym[w] = merged, r += 2;
      } else {
        sym[w] = sym[r], r += 1;
      }
    }
    sym.resize(w);
  }
  out.insert(out.end(), sym.begin(), sym.end());
  if (key.size() > kCachedPieceBytes)
    return;  // long pieces are rare, and would make an entry's size unbounded
  if (cache_.size() >= cache_limit_) cache_.clear();
  cache_.emplace(std::move(key), std::move(sym));
}

// Every match is a piece (so is text between matches, which these patterns never leave).
void Tokenizer::for_each_piece(std::string_view text,
                               const std::function<void(std::string_view)>& fn) const {
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  PCRE2_SIZE at = 0;
  while (at < text.size()) {
    int rc = pcre2_jit_match(regex_->code, subject, text.size(), at, 0, regex_->match, nullptr);
    if (rc == PCRE2_ERROR_JIT_BADOPTION)
      rc = pcre2_match(regex_->code, subject, text.size(), at, 0, regex_->match, nullptr);
    if (rc < 0) return fn(text.substr(at));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(regex_->match);
    if (ov[0] > at) fn(text.substr(at, ov[0] - at));
    const PCRE2_SIZE end = std::max(ov[1], ov[0] + 1);  // an empty match steps over one byte
    fn(text.substr(ov[0], end - ov[0]));
    at = end;
  }
}

void Tokenizer::encode_ordinary(std::string_view text, std::vector<uint32_t>& out) const {
  std::string prefixed;
  if (add_prefix_space_ && !text.empty() && text.front() != ' ') {
    prefixed = " " + std::string(text);
    text = prefixed;
  }
  for_each_piece(text, [&](std::string_view piece) { encode_piece(piece, out); });
}

std::vector<uint32_t> Tokenizer::encode(std::string_view text) const {
  std::vector<uint32_t> out;
  out.reserve(text.size() / 3);
  while (!text.empty()) {
    size_t first = std::string_view::npos;
    const std::pair<std::string, uint32_t>* hit = nullptr;
    for (const auto& s : specials_) {
      size_t p = text.find(s.first);
      if (p < first) first = p, hit = &s;
    }
    if (!hit) break;
    encode_ordinary(text.substr(0, first), out);
    out.push_back(hit->second);
    text.remove_prefix(first + hit->first.size());
  }
  encode_ordinary(text, out);
  return out;
}

std::string Tokenizer::token_bytes(uint32_t id) const {
  if (id >= bytes_.size())
    throw RuntimeError("token id " + std::to_string(id) + " is outside the vocabulary (" +
                       std::to_string(bytes_.size()) + ")");
  return bytes_[id];
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids) out += token_bytes(static_cast<uint32_t>(id));
  return out;
}

int64_t Tokenizer::special(const std::string& content) const {
  for (const auto& s : specials_)
    if (s.first == content) return s.second;
  return -1;
}

}  // namespace loom::tok
