// The byte-level BPE on its own: training, save and load, tiktoken rank files, round trips.
// (Agreement with Hugging Face tokenizers is tests/cli/tokenizer_test.cpp.)
#include "tokenizer/tokenizer.hpp"

#include <doctest/doctest.h>

#include <fstream>

#include "core/errors.hpp"
#include "support/process.hpp"

using namespace loom;
using loom::test::TempDir;

namespace {

const char* kText =
    "The quick brown fox jumps over the lazy dog. It's the fox's den; they're 12345 metres away!\n"
    "Café naïve façade — 日本語 🎉  tabs\tand   spaces\r\n<|endoftext|>A second document.\n";

std::string base64(const std::string& in) {
  static const char* chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (unsigned char c : in) {
    acc = (acc << 8) | c, bits += 8;
    while (bits >= 6) bits -= 6, out += chars[(acc >> bits) & 63];
  }
  if (bits > 0) out += chars[(acc << (6 - bits)) & 63];
  while (out.size() % 4) out += '=';
  return out;
}

std::vector<int32_t> ids(const std::vector<uint32_t>& v) {
  return std::vector<int32_t>(v.begin(), v.end());
}

}  // namespace

TEST_CASE("a trained tokenizer round-trips any text, and saving and loading it keeps every id") {
  std::vector<std::string> texts(20, kText);
  tok::Tokenizer t = tok::Tokenizer::train(texts, 320);
  CHECK(t.vocab_size() == 320);
  CHECK(t.special("<|endoftext|>") == 319);
  const std::vector<uint32_t> e = t.encode(kText);
  CHECK(e.size() < std::string(kText).size() / 2);  // merges were learnt
  CHECK(t.decode(ids(e)) == kText);
  CHECK(std::count(e.begin(), e.end(), 319u) == 1);  // the special token is one id
  TempDir d;
  t.save_json(d.path / "t.json");
  tok::Tokenizer back = tok::Tokenizer::from_json_file(d.path / "t.json");
  CHECK(back.encode(kText) == e);
  static const char raw[] =
      "\x00\xff\xfe\x80 bytes that are not UTF-8 \xc3";  // 31 bytes, NUL first
  const std::string binary(raw, sizeof raw - 1);
  CHECK(back.decode(ids(back.encode(binary))) == binary);
}

TEST_CASE("a tiktoken rank file of the same vocabulary encodes as the BPE merges do") {
  std::vector<std::string> texts(20, kText);
  tok::Tokenizer t = tok::Tokenizer::train(texts, 400, {});
  TempDir d;
  {
    std::ofstream f(d.path / "t.tiktoken");
    for (int64_t id = 0; id < t.vocab_size(); ++id)
      f << base64(t.token_bytes(static_cast<uint32_t>(id))) << " " << id << "\n";
  }
  tok::Tokenizer tk =
      tok::Tokenizer::from_tiktoken(d.path / "t.tiktoken", tok::kGpt2Pattern, {"<|endoftext|>"});
  CHECK(tk.encode("The quick brown fox's 12345 metres") ==
        t.encode("The quick brown fox's 12345 metres"));
  CHECK(tk.special("<|endoftext|>") == t.vocab_size());
  CHECK(tk.decode(ids(tk.encode(kText))) == kText);
}

TEST_CASE("a vocabulary without every byte, or a merge of unknown tokens, is refused") {
  TempDir d;
  const std::string missing =
      d.write("m.json", R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
    "pre_tokenizer": {"type": "ByteLevel"}})");
  CHECK_THROWS_WITH_AS(tok::Tokenizer::from_json_file(missing),
                       doctest::Contains("has no token for byte 0"), ConfigError);
  const std::string bad_merge =
      d.write("b.json", R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a c"]},
    "pre_tokenizer": {"type": "ByteLevel"}})");
  CHECK_THROWS_WITH_AS(tok::Tokenizer::from_json_file(bad_merge),
                       doctest::Contains("merge \"a c\" names a token missing"), ConfigError);
  CHECK_THROWS_WITH_AS(tok::Tokenizer::train({"x"}, 100),
                       "--vocab-size 100 is less than the 256 bytes plus 1 special tokens",
                       UsageError);
}
