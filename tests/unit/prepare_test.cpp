// The pieces of `loom data prepare` (runtime/data/): compressed inputs read as the plain file, bad
// records named by file and line, UTF-8 checked by RFC 3629's table, output independent of
// threads and batches; and the blend's routing of samples to sources.
#include "data/prepare.hpp"

#include <doctest/doctest.h>

#include <map>

#include "core/errors.hpp"
#include "data/batches.hpp"
#include "data/blend.hpp"
#include "data/documents.hpp"
#include "data/input_stream.hpp"
#include "support/process.hpp"

using namespace loom;
using namespace loom::test;
namespace fs = std::filesystem;

namespace {

std::vector<std::string> lines_of(const std::string& path) {
  data::InputStream in(path);
  std::vector<std::string> out;
  for (std::string line; in.next_line(line);) out.push_back(line);
  return out;
}

std::string jsonl_of(int n) {
  std::string s;
  for (int i = 0; i < n; ++i)
    s += "{\"id\": " + std::to_string(i) + ", \"text\": \"document " + std::to_string(i) +
         " caf\\u00e9 \\n line two\"}\n";
  return s;
}

}  // namespace

TEST_CASE(
    "gzip, zstd and concatenated gzip members read as the plain file, lines and last line alike") {
  TempDir t;
  const std::string plain =
      t.write("a.jsonl", jsonl_of(3000) + "{\"text\": \"no newline at the end\"}");
  REQUIRE(sh("cd " + t.path.string() +
             " && gzip -k a.jsonl && zstd -q a.jsonl && head -c 50000 a.jsonl > h && "
             "tail -c +50001 a.jsonl > r && gzip h r && cat h.gz r.gz > two.gz")
              .rc == 0);
  const std::vector<std::string> want = lines_of(plain);
  REQUIRE(want.size() == 3001);
  CHECK(want.back() == "{\"text\": \"no newline at the end\"}");
  for (const char* f : {"a.jsonl.gz", "a.jsonl.zst", "two.gz"}) {
    INFO(f);
    CHECK(lines_of((t.path / f).string()) == want);
  }
  data::InputStream z((t.path / "a.jsonl.zst").string());
  CHECK(std::string(z.format()) == "zstd");
  // A skippable frame first, as pzstd writes: magic 0x184D2A50, a 4-byte length, the payload.
  t.write("skip.zst", std::string("\x50\x2a\x4d\x18\x04\x00\x00\x00loom", 12) +
                          read_text(t.path / "a.jsonl.zst"));
  CHECK(lines_of((t.path / "skip.zst").string()) == want);
  t.write("a.xz", std::string("\xfd"
                              "7zXZ\0rest",
                              10));
  CHECK(error_of([&] { lines_of((t.path / "a.xz").string()); }) ==
        "input '" + (t.path / "a.xz").string() +
            "' is xz-compressed; Loom reads gzip and zstd: pipe it in instead "
            "(xz -dc FILE | loom data prepare --jsonl - ...)");
}

TEST_CASE(
    "a JSONL line longer than one document may be is an error naming it, before it is held whole") {
  TempDir t;
  const std::string in = t.write(
      "c.jsonl", "{\"text\": \"short\"}\n{\"text\": \"" + std::string(3 << 20, 'x') + "\"}\n");
  data::DocumentReader r({in}, data::InputFormat::Jsonl, 1 << 20);
  data::RawDocument d;
  REQUIRE(r.next(d));
  CHECK(error_of([&] { r.next(d); }) == in + ":2: a line longer than the 1 MiB one document may "
                                             "take under --memory-mb (is it JSONL?)");
  // Just past the limit, with its newline in the same read.
  const std::string near = t.write("n.jsonl", std::string((1 << 20) + 10, ' ') + "{}\n");
  data::DocumentReader n({near}, data::InputFormat::Jsonl, 1 << 20);
  CHECK(error_of([&] { n.next(d); }) == near +
                                            ":1: a line longer than the 1 MiB one document may "
                                            "take under --memory-mb (is it JSONL?)");
}

TEST_CASE("a truncated or corrupt compressed file is an error naming it and the byte offset") {
  TempDir t;
  t.write("a.jsonl", jsonl_of(20000));
  REQUIRE(sh("cd " + t.path.string() +
             " && gzip -k a.jsonl && zstd -q a.jsonl && head -c 2000 a.jsonl.gz > cut.gz && "
             "head -c 2000 a.jsonl.zst > cut.zst")
              .rc == 0);
  const auto read_all = [&](const std::string& f) {
    return [&t, f] { lines_of((t.path / f).string()); };
  };
  CHECK(
      error_of(read_all("cut.gz")) ==
      "input '" + (t.path / "cut.gz").string() +
          "': the gzip stream is truncated: the file ends at byte 2000 inside a compressed frame");
  CHECK(
      error_of(read_all("cut.zst")) ==
      "input '" + (t.path / "cut.zst").string() +
          "': the zstd stream is truncated: the file ends at byte 2000 inside a compressed frame");
  std::string bytes = read_text(t.path / "a.jsonl.gz");
  bytes[bytes.size() / 2] ^= 0x55;
  t.write("bad.gz", bytes);
  const std::string e = error_of(read_all("bad.gz"));
  CHECK(e.find("input '" + (t.path / "bad.gz").string() + "': corrupt gzip data, found at byte ") ==
        0);
}

TEST_CASE("a record that is not a document names the file, the line and why") {
  const auto why = [](const std::string& line, data::InputFormat f = data::InputFormat::Jsonl) {
    data::RawDocument d;
    d.line = 7, d.bytes = line;
    return error_of([&] { data::document_text(d, f, "text", "c.jsonl"); });
  };
  CHECK(why("not json").find("c.jsonl:7: not a JSON value (column 2: syntax error") == 0);
  CHECK(why("{\"body\": \"x\", \"id\": 1}") ==
        "c.jsonl:7: no \"text\" field (the record has: body, id); choose one with --field");
  CHECK(why("{\"text\": 5}") == "c.jsonl:7: \"text\" is a number, not a string");
  CHECK(why("[\"text\"]") == "c.jsonl:7: a JSON array, not an object with a \"text\" field");
  CHECK(why("{\"text\": \"a\", \"n\": 1e400}").find("c.jsonl:7: not a JSON value (") ==
        0);  // nlohmann's out_of_range
  CHECK(why("{\"text\": \"caf\xc3\"}") == "c.jsonl:7: invalid UTF-8 (byte 0xc3 at offset 13)");
  CHECK(why("line one\nline \xff two", data::InputFormat::Text) ==
        "c.jsonl:2: invalid UTF-8 (byte 0xff at offset 14)");
  data::RawDocument ok;
  ok.bytes = "{\"text\": \"caf\\u00e9 \\ud83d\\ude80\"}";
  CHECK(data::document_text(ok, data::InputFormat::Jsonl, "text", "c.jsonl") ==
        "caf\xc3\xa9 \xf0\x9f\x9a\x80");
}

TEST_CASE(
    "UTF-8 is checked by RFC 3629's table: overlong forms, surrogates and code points past "
    "U+10FFFF are not") {
  CHECK(data::invalid_utf8_at("plain ascii, caf\xc3\xa9, \xe2\x82\xac, \xf0\x9f\x98\x80") ==
        std::string::npos);
  CHECK(data::invalid_utf8_at("a\xc0\xaf") == 1);          // overlong '/'
  CHECK(data::invalid_utf8_at("ab\xe0\x80\xaf") == 2);     // overlong, three bytes
  CHECK(data::invalid_utf8_at("\xed\xa0\x80") == 0);       // U+D800, a surrogate
  CHECK(data::invalid_utf8_at("x\xf4\x90\x80\x80") == 1);  // U+110000
  CHECK(data::invalid_utf8_at("\xe2\x82") == 0);           // cut short
  CHECK(data::invalid_utf8_at("\x80") == 0);               // a continuation byte alone
}

TEST_CASE(
    "prepare's shards do not depend on the thread count or the batch size, and --skip-bad counts "
    "what it passes over") {
  TempDir t;
  std::string text = jsonl_of(9000);
  text.insert(text.find("{\"id\": 4000,"),
              "{\"id\": \"no text\"}\n\n");  // the blank line is passed over, not counted
  const std::string in = t.write("c.jsonl", text);
  data::PrepareOptions o;
  o.inputs = {in}, o.shard_tokens = 50'000, o.val_fraction = 0.1, o.skip_bad = true;
  o.out = t.path / "one", o.threads = 1;
  const data::PrepareSummary one = data::prepare(o);
  o.out = t.path / "two", o.threads = 2, o.memory_bytes = uint64_t{64} << 20,
  o.batch_documents = 100;
  const data::PrepareSummary two = data::prepare(o);
  CHECK(one.totals.skipped == 1);
  CHECK(one.first_skipped ==
        in + ":4001: no \"text\" field (the record has: id); choose one with --field");
  CHECK(one.totals.documents == 9001);
  REQUIRE(one.train_shards > 2);
  CHECK(one.train_shards == two.train_shards);
  for (const auto& e : fs::directory_iterator(t.path / "one"))
    if (e.path().extension() == ".bin")
      CHECK(read_text(e.path()) == read_text(t.path / "two" / e.path().filename()));
  t.write("one/tokenizer.json", "{}");  // left by an earlier prepare with a tokenizer
  o.out = t.path / "one", o.threads = 1;
  data::prepare(o);
  CHECK(!fs::exists(t.path / "one" / "tokenizer.json"));  // these shards are bytes
  o.skip_bad = false, o.out = t.path / "strict";
  CHECK(error_of([&] { data::prepare(o); }) ==
        in + ":4001: no \"text\" field (the record has: id); choose one with --field "
             "(--skip-bad passes over such documents and counts them)");
}

TEST_CASE(
    "a blend routes each sample to one source, within one sample per level of its weight's share") {
  const std::vector<double> w = {0.2, 0.7, 0.1};
  data::Blend b(w);
  std::vector<int64_t> seen(3, 0);
  for (int64_t g = 0; g < 10'000; ++g) {
    const auto [s, k] = b.route(g);
    REQUIRE(k == seen[s]);  // the source's samples are numbered 0, 1, 2, ... in order
    ++seen[s];
    for (int i = 0; i < 3; ++i) {
      REQUIRE(b.count(i, g + 1) == seen[i]);
      REQUIRE(std::abs(double(seen[i]) - w[i] * double(g + 1)) <=
              2.0);  // two levels for three sources
    }
  }
  data::Blend zero({0.0, 1.0});
  for (int64_t g = 0; g < 1000; ++g) REQUIRE(zero.route(g).first == 1);
}
