// `loom data prepare` as a user runs it: JSONL from files and standard input, ids equal to Hugging
// Face tokenizers' (tests/reference/prepare_reference.py, in .venv), a prepare killed at seeded
// points and resumed gives the bytes of one that ran through, and bad input stops with its file
// and line; a blend's directories and weights are checked at config time.
#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <string>

#include "support/process.hpp"

using namespace loom::test;
namespace fs = std::filesystem;

namespace {

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

const std::string kReference =
    LOOM_SOURCE_DIR "/.venv/bin/python " LOOM_SOURCE_DIR "/tests/reference/prepare_reference.py ";

// The fortunes as JSONL (15k documents), and a 1024-token tokenizer learned from them.
struct Corpus {
  TempDir t;
  std::string jsonl = (t.path / "f.jsonl").string(), tokenizer;
  Corpus() {
    REQUIRE(sh(kReference + "corpus /usr/share/games/fortunes " + jsonl + " 1 7").rc ==
            0);  // one pass: 15k documents
    auto r = run_loom("data prepare --jsonl " + jsonl + " --out " + (t.path / "tok").string() +
                      " --train-tokenizer --vocab-size 1024 --tokenizer-sample-mb 1");
    INFO(r.out);
    REQUIRE(r.rc == 0);
    CHECK(has(r.out, "trained a 1024-token byte-level BPE vocabulary from "));
    const size_t mb = r.out.find(
        " MB) in ");  // the seeded sample: at most --tokenizer-sample-mb, 1 of the 2.5 MB
    REQUIRE(mb != std::string::npos);
    const double sampled = std::stod(r.out.substr(r.out.rfind('(', mb) + 1));
    CHECK(sampled <= 1.0);
    CHECK(sampled > 0.5);
    tokenizer = (t.path / "tok" / "tokenizer.json").string();
  }
};

std::string shard_bytes(const fs::path& dir) {
  std::string all;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir)) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const fs::path& f : files)
    if (f.extension() == ".bin") all += f.filename().string() + ":" + read_text(f);
  return all;
}

}  // namespace

TEST_CASE(
    "prepared ids equal Hugging Face tokenizers' for 1,000 sampled documents, from a file and from "
    "standard input") {
  Corpus c;
  const std::string sample = (c.t.path / "s.jsonl").string();
  REQUIRE(sh(kReference + "sample " + c.jsonl + " " + sample + " 1000 11").rc == 0);
  REQUIRE(sh("zstd -q " + sample + " -o " + sample + ".zst").rc == 0);
  auto r = run_loom("data prepare --jsonl " + sample + ".zst --out " + (c.t.path / "a").string() +
                    " --tokenizer " + c.tokenizer + " --val-fraction 0");
  INFO(r.out);
  REQUIRE(r.rc == 0);
  CHECK(has(r.out, "from 1000 documents"));
  auto check =
      sh(kReference + "check " + c.tokenizer + " " + sample + " " + (c.t.path / "a").string());
  INFO(check.out);
  CHECK(check.rc == 0);
  CHECK(has(check.out, "equal: 1000 documents"));
  // On a terminal (script(1) gives it one) a progress line is drawn, then cleared for the summary.
  auto tty = sh("script -qec '" LOOM_BIN " data prepare --jsonl " + sample + " --out " +
                (c.t.path / "c").string() + " --tokenizer " + c.tokenizer +
                " --val-fraction 0' /dev/null");
  INFO(tty.out);
  CHECK(tty.rc == 0);
  CHECK(has(tty.out, "\r\033[Kprepare: encoding: "));
  CHECK(has(tty.out, " (100%) read, 1.0k documents, "));
  CHECK(has(tty.out, "\r\033[Kwrote 1 training and 0 validation shards"));
  auto piped = sh("cat " + sample + " | " LOOM_BIN " data prepare --jsonl - --out " +
                  (c.t.path / "b").string() + " --tokenizer " + c.tokenizer + " --val-fraction 0");
  REQUIRE(piped.rc == 0);
  CHECK(shard_bytes(c.t.path / "b") == shard_bytes(c.t.path / "a"));
}

TEST_CASE(
    "a prepare killed at five seeded points and resumed writes the bytes of one that ran through") {
  Corpus c;
  REQUIRE(sh("zstd -q " + c.jsonl + " -o " + c.jsonl + ".zst").rc == 0);
  const std::string common = "data prepare --jsonl " + c.jsonl + ".zst --tokenizer " + c.tokenizer +
                             " --shard-tokens 60000 --val-fraction 0.05 --memory-mb 64 --out ";
  REQUIRE(run_loom(common + (c.t.path / "whole").string()).rc == 0);
  const std::string whole = shard_bytes(c.t.path / "whole");
  REQUIRE(whole.size() > 10 * 60000 * 2);
  // Kill points in tokens written (both splits); the first is mid-way through a shard.
  std::mt19937 rng(20261206);
  std::vector<int64_t> at = {90'000};
  while (at.size() < 5) at.push_back(at.back() + 60'000 + rng() % 150'000);
  const std::string out = (c.t.path / "killed").string();
  for (int64_t k : at) {
    auto r =
        run_loom(common + out + " --resume", "LOOM_PREPARE_KILL_AT_TOKEN=" + std::to_string(k));
    INFO("killed at token " << k << ": " << r.out);
    REQUIRE(r.rc == 128 + 9);
    bool partial = false;
    for (const auto& e : fs::directory_iterator(out))
      partial = partial || e.path().extension() == ".tmp";
    CHECK(partial);  // the shard it was writing is not named
  }
  auto last = run_loom(common + out + " --resume");
  INFO(last.out);
  REQUIRE(last.rc == 0);
  CHECK(has(last.out, "resumed"));
  CHECK(shard_bytes(out) == whole);
  CHECK(has(run_loom(common + out + " --resume").out, "is complete already"));
  auto changed = run_loom("data prepare --jsonl " + c.jsonl + ".zst --tokenizer " + c.tokenizer +
                          " --shard-tokens 50000 --val-fraction 0.05 --memory-mb 64 --out " + out +
                          " --resume");
  CHECK(changed.rc == 2);
  CHECK(has(changed.out, "--resume: the earlier prepare into '" + out +
                             "' had shard_tokens = 60000, this one 50000"));
}

TEST_CASE(
    "bad input stops the prepare naming the file and the line, or is counted under --skip-bad") {
  TempDir t;
  const std::string ok = "{\"text\": \"fine\"}\n";
  struct Case {
    std::string file, text, message;
  };
  const std::vector<Case> cases = {
      {"notjson.jsonl", ok + "{\"text\": oops}\n", ":2: not a JSON value (column 10: syntax error"},
      {"nofield.jsonl", ok + ok + "{\"body\": \"x\"}\n",
       ":3: no \"text\" field (the record has: body); choose one with --field"},
      {"utf8.jsonl", ok + "{\"text\": \"\xff\"}\n", ":2: invalid UTF-8 (byte 0xff at offset 10)"},
      {"utf8.txt", "line one\nline \xc3\x28 two\n", ":2: invalid UTF-8 (byte 0xc3 at offset 14)"},
  };
  for (const Case& k : cases) {
    const std::string in = t.write(k.file, k.text),
                      kind = k.file.ends_with(".txt") ? " --text " : " --jsonl ";
    auto r = run_loom("data prepare" + kind + in + " --out " + (t.path / "o").string());
    INFO(k.file << ": " << r.out);
    CHECK(r.rc == 1);
    CHECK(has(r.out, "loom: error: " + in + k.message));
    auto skip = run_loom("data prepare" + kind + t.write("two" + k.file, ok + k.text) + " --out " +
                         (t.path / "s").string() + " --skip-bad");
    CHECK(skip.rc ==
          (kind == " --text " ? 2 : 0));  // a text file is one document: no tokens are left
    if (kind == " --jsonl ")
      CHECK(has(skip.out, "skipped 1 bad documents (--skip-bad); the first: "));
  }
  t.write("big.jsonl", "");
  REQUIRE(
      sh("cd " + t.path.string() +
         " && for i in $(seq 3000); do echo '{\"text\": \"document '$i'\"}'; done > big.jsonl && "
         "gzip -k big.jsonl && zstd -q big.jsonl && head -c 1000 big.jsonl.gz > cut.gz && head -c "
         "1000 big.jsonl.zst > cut.zst")
          .rc == 0);
  for (const char* f : {"cut.gz", "cut.zst"}) {
    auto r = run_loom("data prepare --jsonl " + (t.path / f).string() + " --out " +
                      (t.path / "o").string());
    CHECK(r.rc == 1);
    CHECK(has(r.out,
              "input '" + (t.path / f).string() + "': the " +
                  (std::string(f) == "cut.gz" ? "gzip" : "zstd") +
                  " stream is truncated: the file ends at byte 1000 inside a compressed frame"));
  }
}

TEST_CASE("a blend's weights and directories are checked at config time") {
  TempDir t;
  for (const char* d : {"a", "b"}) {
    t.write(std::string(d) + ".txt", std::string(4000, d[0]) + "\n");
    REQUIRE(run_loom("data prepare --text " + (t.path / (std::string(d) + ".txt")).string() +
                     " --out " + (t.path / d).string())
                .rc == 0);
  }
  const std::string cfg = t.write(
      "c.toml", "[model]\npreset = \"tiny\"\n[data]\nblend = [\"" + (t.path / "a").string() +
                    "\", \"" + (t.path / "b").string() + "\"]\nweights = [1, 3]\n");
  auto ok = run_loom("config check " + cfg);
  INFO(ok.out);
  CHECK(ok.rc == 0);
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"--set data.weights=[1]",
       "--set data.weights=[1]: [data] weights has 1 entries and [data] blend 2: give one weight "
       "per blend directory"},
      {"--set data.weights=[0,0]", "[data] weights must sum to a positive number"},
      {"--set data.weights=[1,-1]",
       "[data] weights: every element must be array of numbers >= 0, got integer -1"},
      {"--set 'data.blend=[\"" + (t.path / "a").string() + "\",\"" + (t.path / "nowhere").string() +
           "\"]'",
       "[data] blend names \"" + (t.path / "nowhere").string() + "\", which does not exist"},
  };
  for (const auto& [set, message] : bad) {
    auto r = run_loom("config check " + cfg + " " + set);
    INFO(set << ": " << r.out);
    CHECK(r.rc == 2);
    CHECK(has(r.out, message));
  }
  REQUIRE(run_loom("data prepare --text " + (t.path / "b.txt").string() + " --out " +
                   (t.path / "b").string() + " --train-tokenizer --vocab-size 260")
              .rc == 0);
  auto differ = run_loom("config check " + cfg);
  CHECK(differ.rc == 2);
  CHECK(
      has(differ.out,
          "[data] blend: '" + (t.path / "a").string() + "' and '" + (t.path / "b").string() +
              "' were tokenized differently (the first has no tokenizer.json, so it holds bytes)"));
}
