// Learning a byte-level BPE vocabulary: count the pieces the pattern splits the texts into, then
// repeatedly merge the most frequent adjacent pair of tokens (ties: the pair whose bytes sort
// first), updating the counts of the words that contain it.
#include <algorithm>
#include <functional>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "core/errors.hpp"
#include "tokenizer/tokenizer.hpp"

namespace loom::tok {

namespace {

struct Word {
  std::vector<uint32_t> sym;
  int64_t count;
};

uint64_t key(uint32_t a, uint32_t b) { return (static_cast<uint64_t>(a) << 32) | b; }

// Adds `sign` x the word's count to every adjacent pair, noting where each pair occurs.
void count_pairs(const Word& w, int index, int sign, std::unordered_map<uint64_t, int64_t>& counts,
                 std::unordered_map<uint64_t, std::vector<int>>& where) {
  for (size_t i = 0; i + 1 < w.sym.size(); ++i) {
    const uint64_t k = key(w.sym[i], w.sym[i + 1]);
    counts[k] += sign * w.count;
    if (sign > 0) where[k].push_back(index);
  }
}

// Every piece of the texts (special tokens taken out first) as a word of bytes, with how often
// it occurs, in a fixed order so that training is deterministic.
// `pieces_of` is the tokenizer's pre-tokenizer: it calls back with each piece of a text.
using PieceFn = std::function<void(std::string_view)>;
std::vector<Word> count_words(
    const std::vector<std::string>& texts, const std::vector<std::string>& specials,
    const std::function<void(std::string_view, const PieceFn&)>& pieces_of) {
  std::unordered_map<std::string, int64_t> pieces;
  for (const std::string& text : texts) {
    std::string_view rest = text;
    while (!rest.empty()) {
      size_t cut = rest.size(), len = 0;
      for (const std::string& s : specials)
        if (size_t p = rest.find(s); p < cut) cut = p, len = s.size();
      pieces_of(rest.substr(0, cut), [&](std::string_view piece) { ++pieces[std::string(piece)]; });
      rest.remove_prefix(std::min(rest.size(), cut + len));
    }
  }
  std::vector<Word> words;
  for (const auto& [piece, count] : std::map<std::string, int64_t>(pieces.begin(), pieces.end())) {
    Word w{{}, count};
    for (unsigned char c : piece) w.sym.push_back(c);
    words.push_back(std::move(w));
  }
  return words;
}

}  // namespace

Tokenizer Tokenizer::train(const std::vector<std::string>& texts, int64_t vocab_size,
                           const std::vector<std::string>& specials, const std::string& pattern) {
  const int64_t merges_wanted = vocab_size - 256 - static_cast<int64_t>(specials.size());
  if (merges_wanted < 0)
    throw UsageError("--vocab-size " + std::to_string(vocab_size) +
                     " is less than the 256 bytes plus " + std::to_string(specials.size()) +
                     " special tokens");
  Tokenizer t;
  for (int b = 0; b < 256; ++b) {
    t.bytes_.push_back(std::string(1, static_cast<char>(b)));
    t.ids_[t.bytes_.back()] = static_cast<uint32_t>(b);
  }
  t.finish(pattern);
  std::vector<Word> words =
      count_words(texts, specials,
                  [&](std::string_view text, const PieceFn& fn) { t.for_each_piece(text, fn); });
  std::unordered_map<uint64_t, int64_t> counts;
  std::unordered_map<uint64_t, std::vector<int>> where;
  for (size_t i = 0; i < words.size(); ++i)
    count_pairs(words[i], static_cast<int>(i), 1, counts, where);

  for (int64_t m = 0; m < merges_wanted; ++m) {
    uint64_t best = 0;
    int64_t best_count = 0;
    for (const auto& [k, c] : counts) {
      if (c < best_count || c <= 0) continue;
      if (c > best_count || std::tie(t.bytes_[k >> 32], t.bytes_[k & 0xffffffffu]) <
                                std::tie(t.bytes_[best >> 32], t.bytes_[best & 0xffffffffu]))
        best = k, best_count = c;
    }
    if (best_count == 0) break;  // nothing left to merge: a smaller vocabulary
    const uint32_t a = static_cast<uint32_t>(best >> 32),
                   b = static_cast<uint32_t>(best & 0xffffffffu);
    const uint32_t merged = static_cast<uint32_t>(t.bytes_.size());
    t.bytes_.push_back(t.bytes_[a] + t.bytes_[b]);
    t.ids_[t.bytes_.back()] = merged;
    t.add_merge(a, b, merged);
    std::vector<int> affected = std::move(where[best]);
    where.erase(best);
    std::sort(affected.begin(), affected.end());
    affected.erase(std::unique(affected.begin(), affected.end()), affected.end());
    for (int i : affected) {
      Word& w = words[i];
      count_pairs(w, i, -1, counts, where);
      size_t out = 0;
      for (size_t r = 0; r < w.sym.size(); ++out) {
        if (r + 1 < w.sym.size() && w.sym[r] == a && w.sym[r + 1] == b)
          w.sym[out] = merged, r += 2;
        else
          w.sym[out] = w.sym[r], r += 1;
      }
      w.sym.resize(out);
      count_pairs(w, i, 1, counts, where);
    }
    counts.erase(best);
  }
  for (const std::string& s : specials) {
    t.specials_.emplace_back(s, static_cast<uint32_t>(t.bytes_.size()));
    t.bytes_.push_back(s);
  }
  t.finish(pattern);
  return t;
}

}  // namespace loom::tok
