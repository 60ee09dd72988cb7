#include <doctest/doctest.h>

#include <fstream>

#include "core/errors.hpp"
#include "data/batches.hpp"
#include "data/shards.hpp"
#include "support/process.hpp"

using namespace loom;
using loom::test::TempDir;

namespace {
std::string error_reading(const std::filesystem::path& p, int64_t vocab = 256) {
  try {
    data::read_shard(p, vocab);
  } catch (const RuntimeError& e) {
    return e.what();
  }
  return "<no error>";
}
bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
}  // namespace

TEST_CASE("a shard round-trips in llm.c's layout") {
  TempDir t;
  std::vector<uint16_t> tokens = {1, 2, 3, 255, 0};
  data::write_shard(t.path / "a.bin", tokens);
  CHECK(std::filesystem::file_size(t.path / "a.bin") == 1024 + 2 * tokens.size());
  std::ifstream in(t.path / "a.bin", std::ios::binary);
  int32_t header[3];
  in.read(reinterpret_cast<char*>(header), sizeof header);
  CHECK(header[0] == 20240520);
  CHECK(header[1] == 1);
  CHECK(header[2] == 5);
  CHECK(data::read_shard(t.path / "a.bin", 256) == tokens);
}

TEST_CASE("bad shards are rejected with what is wrong") {
  TempDir t;
  data::write_shard(t.path / "ok.bin", {1, 2, 300});
  CHECK(has(error_reading(t.path / "ok.bin", 256), "token 300 at position 2 is outside the vocabulary (256)"));
  std::string text = t.write("magic.bin", std::string(1030, 'x'));
  CHECK(has(error_reading(text), "bad magic"));
  data::write_shard(t.path / "short.bin", {1, 2, 3, 4});
  std::filesystem::resize_file(t.path / "short.bin", 1024 + 6);
  CHECK(has(error_reading(t.path / "short.bin"), "header says 4 tokens (1032 bytes) but the file has 1030 bytes"));
  CHECK(has(error_reading(t.write("tiny.bin", "abc")), "shorter than the 1024-byte header"));
  try {
    data::read_split(t.path / "nowhere", "train", 256);
    FAIL("expected an error");
  } catch (const RuntimeError& e) {
    CHECK(has(e.what(), "cannot read data directory"));
  }
}

TEST_CASE("prepare splits each file's tail into validation") {
  TempDir t;
  std::string a = t.write("a.txt", std::string(100, 'a')), b = t.write("b.txt", std::string(50, 'b'));
  data::PrepareReport r = data::prepare_text({a, b}, t.path / "out", 0.1);
  CHECK(r.train_tokens == 90 + 45);
  CHECK(r.val_tokens == 10 + 5);
  std::vector<uint16_t> val = data::read_split(t.path / "out", "val", 256);
  CHECK(val.size() == 15);
  CHECK(val.front() == 'a');
  CHECK(val.back() == 'b');
}

TEST_CASE("a batch is a pure function of (seed, step, global sample index)") {
  std::vector<uint16_t> train(5000), val(600);
  for (size_t i = 0; i < train.size(); ++i) train[i] = i % 251;
  data::Batches b(train, val, 16, 7), same(train, val, 16, 7), other(train, val, 16, 8);
  CHECK(b.train_offset(3, 5) == same.train_offset(3, 5));
  CHECK(b.train_offset(3, 5) != other.train_offset(3, 5));
  CHECK(b.train_offset(3, 5) != b.train_offset(4, 5));
  // Four samples at once equal two halves fetched separately, as on two ranks.
  std::vector<int32_t> tok(4 * 16), tgt(4 * 16), tok2(4 * 16), tgt2(4 * 16);
  b.train_batch(3, 0, 4, tok.data(), tgt.data());
  b.train_batch(3, 0, 2, tok2.data(), tgt2.data());
  b.train_batch(3, 2, 2, tok2.data() + 32, tgt2.data() + 32);
  CHECK(tok == tok2);
  CHECK(tgt == tgt2);
  for (int t = 0; t + 1 < 16; ++t) CHECK(tgt[t] == tok[t + 1]);  // targets are the next tokens
  CHECK(b.val_windows() == (600 - 1) / 16);
}
