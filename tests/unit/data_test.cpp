#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <numeric>

#include "core/errors.hpp"
#include "data/batches.hpp"
#include "data/prepare.hpp"
#include "data/shards.hpp"
#include "support/process.hpp"

using namespace loom;
using loom::test::TempDir;

namespace {
std::string error_reading(const std::filesystem::path& p, int64_t vocab = 256) {
  try {
    data::TokenShard shard(p, vocab);
    std::vector<int32_t> all(shard.size());
    shard.read(0, shard.size(), all.data());
  } catch (const RuntimeError& e) {
    return e.what();
  }
  return "<no error>";
}
std::vector<int32_t> read_all(const std::filesystem::path& p, int64_t vocab) {
  data::TokenShard shard(p, vocab);
  std::vector<int32_t> all(shard.size());
  shard.read(0, shard.size(), all.data());
  return all;
}
// A split of `n` tokens (i % 251) in one shard, as TokenSplit reads it.
data::TokenSplit split_of(const std::filesystem::path& dir, const std::string& name, int64_t n) {
  std::vector<uint32_t> t(n);
  for (int64_t i = 0; i < n; ++i) t[i] = i % 251;
  std::filesystem::create_directories(dir);
  // Written once: a split already open elsewhere in a test would see its shard replaced.
  if (!std::filesystem::exists(dir / (name + "_000000.bin")))
    data::write_shard(dir / (name + "_000000.bin"), t, 256);
  return data::TokenSplit(dir, name, 256);
}
bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}
}  // namespace

TEST_CASE("a shard round-trips in llm.c's layout, uint16 or uint32 as the vocabulary needs") {
  TempDir t;
  std::vector<uint32_t> tokens = {1, 2, 3, 255, 0};
  data::write_shard(t.path / "a.bin", tokens, 256);
  CHECK(std::filesystem::file_size(t.path / "a.bin") == 1024 + 2 * tokens.size());
  std::ifstream in(t.path / "a.bin", std::ios::binary);
  int32_t header[3];
  in.read(reinterpret_cast<char*>(header), sizeof header);
  CHECK(header[0] == 20240520);
  CHECK(header[1] == 1);
  CHECK(header[2] == 5);
  CHECK(read_all(t.path / "a.bin", 256) == std::vector<int32_t>{1, 2, 3, 255, 0});
  // Llama 3's 128256 ids need 4 bytes: llm.c's magic 20240801, version 7.
  data::write_shard(t.path / "wide.bin", {128000, 5, 128255}, 128256);
  CHECK(std::filesystem::file_size(t.path / "wide.bin") == 1024 + 4 * 3);
  std::ifstream wide(t.path / "wide.bin", std::ios::binary);
  wide.read(reinterpret_cast<char*>(header), sizeof header);
  CHECK(header[0] == 20240801);
  CHECK(header[1] == 7);
  CHECK(read_all(t.path / "wide.bin", 128256) == std::vector<int32_t>{128000, 5, 128255});
}

TEST_CASE("llm.c's shard names are found, several shards read as one stream") {
  TempDir t;
  const auto dir = t.path / "fineweb";
  std::filesystem::create_directories(dir);
  data::write_shard(dir / "fineweb_train_000001.bin", {1, 2, 3}, 256);
  data::write_shard(dir / "fineweb_train_000002.bin", {4, 5}, 256);
  data::write_shard(dir / "fineweb_val_000000.bin", {9}, 256);
  t.write("fineweb/notes_training.txt", "not a shard");
  data::TokenSplit train(dir, "train", 256), val(dir, "val", 256);
  CHECK(train.size() == 5);
  CHECK(train.all() == std::vector<int32_t>{1, 2, 3, 4, 5});
  std::vector<int32_t> across(3);
  train.read(1, 3, across.data());  // across the shard boundary
  CHECK(across == std::vector<int32_t>{2, 3, 4});
  CHECK(val.all() == std::vector<int32_t>{9});
}

TEST_CASE("bad shards are rejected with what is wrong") {
  TempDir t;
  data::write_shard(t.path / "ok.bin", {1, 2, 300}, 512);
  CHECK(has(error_reading(t.path / "ok.bin", 256),
            "token 300 at position 2 is outside the vocabulary (256)"));
  std::string text = t.write("magic.bin", std::string(1030, 'x'));
  CHECK(has(error_reading(text), "bad magic"));
  data::write_shard(t.path / "short.bin", {1, 2, 3, 4}, 256);
  std::filesystem::resize_file(t.path / "short.bin", 1024 + 6);
  CHECK(has(error_reading(t.path / "short.bin"),
            "header says 4 tokens (1032 bytes) but the file has 1030 bytes"));
  CHECK(has(error_reading(t.write("tiny.bin", "abc")), "shorter than the 1024-byte header"));
  try {
    data::TokenSplit(t.path / "nowhere", "train", 256);
    FAIL("expected an error");
  } catch (const RuntimeError& e) {
    CHECK(has(e.what(), "cannot read data directory"));
  }
}

TEST_CASE("a shard truncated in place while it is read is an error naming it, not a SIGBUS") {
  TempDir t;
  std::vector<uint32_t> tokens(100000, 7);
  data::write_shard(t.path / "train_000000.bin", tokens, 256);
  data::TokenShard shard(t.path / "train_000000.bin", 256);
  std::vector<int32_t> out(1000);
  shard.read(0, 1000, out.data());
  CHECK(out[999] == 7);
  std::filesystem::resize_file(t.path / "train_000000.bin",
                               4096);  // what `truncate -s 4K` does to it
  try {
    shard.read(90000, 1000, out.data());
    FAIL("expected an error");
  } catch (const RuntimeError& e) {
    CHECK(has(e.what(),
              "train_000000.bin': cannot read tokens 90000..91000: the file now has 4096 bytes, "
              "201024 when the "
              "run opened it (was it truncated or rewritten in place?)"));
  }
  data::write_shard(t.path / "train_000000.bin", tokens,
                    256);  // replaced by rename, as data prepare does
  try {
    shard.read(0, 10, out.data());
    FAIL("expected an error");
  } catch (const RuntimeError& e) {
    CHECK(has(e.what(), "train_000000.bin' was replaced by another file while the run read it"));
  }
}

TEST_CASE(
    "prepare holds whole documents out for validation, and each text file's tail when they are too "
    "few") {
  TempDir t;
  std::vector<std::string> files;
  for (int i = 0; i < 20; ++i)
    files.push_back(t.write("f" + std::to_string(i) + ".txt", std::string(10, char('a' + i))));
  data::PrepareOptions o;
  o.inputs = files, o.format = data::InputFormat::Text, o.out = t.path / "out",
  o.val_fraction = 0.1, o.threads = 2;
  data::PrepareSummary s = data::prepare(o);
  CHECK(s.totals.train_tokens == 180);  // 18 whole documents
  CHECK(s.totals.val_tokens == 20);     // 2 whole documents, every tenth from a seeded start
  std::vector<int32_t> val = data::TokenSplit(t.path / "out", "val", 256).all();
  REQUIRE(val.size() == 20);
  CHECK(val[0] == val[9]);
  CHECK(val[10] == val[19]);
  CHECK(val[9] + 10 == val[10]);

  o.inputs = {t.write("one.txt", std::string(100, 'a') + std::string(10, 'b'))},
  o.out = t.path / "one";
  s = data::prepare(o);
  CHECK(s.totals.train_tokens == 99);  // one document: its tail
  CHECK(s.totals.val_tokens == 11);
  CHECK(data::TokenSplit(t.path / "one", "val", 256).all().back() == 'b');

  o.inputs = {files[0], files[1], files[2]},
  o.out = t.path / "three";  // 3 x 0.1 < 1: each file's tail
  s = data::prepare(o);
  CHECK(s.totals.val_tokens == 3);
  CHECK(!s.split_note.empty());
}

TEST_CASE("prepare refuses input without a single token") {
  TempDir t;
  data::PrepareOptions o;
  o.inputs = {t.write("empty.txt", "")}, o.format = data::InputFormat::Text, o.out = t.path / "out";
  CHECK_THROWS_WITH_AS(data::prepare(o), "the input has no tokens: nothing to write", UsageError);
  CHECK(!std::filesystem::exists(t.path / "out" / "train_000000.bin"));
  CHECK(!std::filesystem::exists(t.path / "out" / "train_000000.bin.tmp"));
}

TEST_CASE("a batch is a pure function of (seed, step, global sample index)") {
  TempDir t;
  auto split = [&](int64_t n) { return split_of(t.path / "d", "train", n); };
  data::Batches b(split(5000), split_of(t.path / "v", "val", 600), 16, 7),
      same(split(5000), {}, 16, 7), other(split(5000), {}, 16, 8);
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

TEST_CASE(
    "epoch sampling visits every window once per epoch, in an order that changes with the epoch") {
  TempDir t;
  // 16 windows of 16 + 1 tokens; a global batch of 4: an epoch is 4 steps.
  data::Batches b(split_of(t.path / "d", "train", 16 * 16 + 1), {}, 16, 3, data::Sampling::Epoch,
                  4);
  REQUIRE(b.train_windows() == 16);
  std::vector<int64_t> first, second;
  for (int64_t step = 1; step <= 8; ++step)
    for (int64_t s = 0; s < 4; ++s) (step <= 4 ? first : second).push_back(b.train_offset(step, s));
  auto sorted = [](std::vector<int64_t> v) {
    std::sort(v.begin(), v.end());
    return v;
  };
  std::vector<int64_t> all;
  for (int64_t w = 0; w < 16; ++w) all.push_back(w * 16);
  CHECK(sorted(first) == all);
  CHECK(sorted(second) == all);
  CHECK(first != second);
  CHECK(b.epoch_of(4) == 0);
  CHECK(b.epoch_of(5) == 1);
  // A permutation of a range that is not a power of four stays inside it and misses nothing.
  std::vector<int64_t> p;
  for (int64_t i = 0; i < 1000; ++i) p.push_back(data::permute(i, 1000, 9, 2));
  std::vector<int64_t> want(1000);
  std::iota(want.begin(), want.end(), 0);
  CHECK(sorted(p) == want);
}
