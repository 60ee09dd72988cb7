// Loom's byte-level BPE against Hugging Face tokenizers (tests/reference/tokenizer_reference.py,
// in .venv from scripts/install-deps.sh): the same ids for a tokenizer Loom trained and for ones
// the library trained (GPT-2's split, and Llama 3's with ignore_merges), on the demo corpus and a
// Unicode torture file; decode(encode(x)) == x; unsupported tokenizers are refused by name.
#include <doctest/doctest.h>

#include <fstream>
#include <sstream>

#include "support/process.hpp"

using namespace loom::test;

namespace {

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

const std::string kPython =
    LOOM_SOURCE_DIR "/.venv/bin/python " LOOM_SOURCE_DIR "/tests/reference/tokenizer_reference.py";

// Accents, CJK, emoji, numbers of every length, whitespace runs, tabs, CRLF, contractions in
// both cases, punctuation runs, a special token in the middle.
const char* kTorture =
    "Hello, World! It's   a test's re-run: 1 12 123 1234 12345 3.14159 -42\n\n\n"
    "café naïve Zürich Ærøskøbing façade ŒUVRE résumé\r\n"
    "日本語のテキスト 中文字符 한국어 텍스트\n"
    "emoji 🎉🚀👍🏽 family 👨‍👩‍👧 flags 🇫🇷\n"
    "\tTabs\tand  double  spaces   and trailing   \n"
    "WE'RE SHOUTING, THEY'LL SEE, I'D'VE DONE IT, you've 'quoted'\n"
    "!!!??? ... --- *** ((( ))) ''' \"\"\" <|endoftext|>next document I'm here\n"
    "    indented code() { return x[i] + y->z; }\n";

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The demo corpus's prose: fortunes, as scripts/fortunes.sh picks them (a few files suffice).
std::string corpus(TempDir& t) {
  auto r =
      sh("find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' ! "
         "-name art "
         "! -name ascii-art ! -name translate-me | sort | head -12 | xargs cat > " +
         (t.path / "corpus.txt").string());
  REQUIRE(r.rc == 0);
  return (t.path / "corpus.txt").string();
}

// Loom's ids and the library's for one file must be equal, and Loom's must decode back.
void check_same_ids(TempDir& t, const std::string& tokenizer, const std::string& text,
                    const std::string& what) {
  auto loom = run_loom("data encode --check --tokenizer " + tokenizer + " --text " + text +
                       " --out " + (t.path / "loom.txt").string());
  INFO(what << "\n" << loom.out);
  REQUIRE(loom.rc == 0);
  CHECK(has(loom.out, "decode(encode(x)) == x"));
  auto py = sh(kPython + " encode " + tokenizer + " " + text + " " + (t.path / "py.txt").string());
  REQUIRE(py.rc == 0);
  const std::string want = slurp(t.path / "py.txt"), got = slurp(t.path / "loom.txt");
  CHECK(!want.empty());
  CHECK(got.size() == want.size());
  CHECK(got == want);
}

}  // namespace

TEST_CASE(
    "a tokenizer Loom trains loads in Hugging Face tokenizers and gives the same ids, torture file "
    "included") {
  TempDir t;
  const std::string text = corpus(t), torture = t.write("torture.txt", kTorture);
  auto prep = run_loom("data prepare --text " + text + " " + torture + " --out " +
                       (t.path / "d").string() + " --train-tokenizer --vocab-size 1024");
  INFO(prep.out);
  REQUIRE(prep.rc == 0);
  CHECK(has(prep.out, "trained a 1024-token byte-level BPE vocabulary"));
  const std::string tj = (t.path / "d" / "tokenizer.json").string();
  check_same_ids(t, tj, text, "Loom-trained, corpus");
  check_same_ids(t, tj, torture, "Loom-trained, torture");
}

TEST_CASE(
    "tokenizers the library trained (GPT-2 split, Llama 3 split with ignore_merges) encode the "
    "same in Loom") {
  TempDir t;
  const std::string text = corpus(t), torture = t.write("torture.txt", kTorture);
  for (const char* kind : {"gpt2", "llama3"}) {
    const std::string tj = (t.path / (std::string(kind) + ".json")).string();
    REQUIRE(sh(kPython + " train " + kind + " " + text + " 800 " + tj).rc == 0);
    check_same_ids(t, tj, text, std::string(kind) + ", corpus");
    check_same_ids(t, tj, torture, std::string(kind) + ", torture");
  }
}

TEST_CASE("tokenizers that are not byte-level BPE are refused, naming the file and the key") {
  TempDir t;
  const std::string text = t.write("x.txt", "hello");
  auto wordpiece =
      run_loom("data encode --text " + text + " --tokenizer " +
               t.write("wp.json",
                       R"({"model": {"type": "WordPiece", "vocab": {}}, "pre_tokenizer": null})"));
  CHECK(wordpiece.rc == 2);
  CHECK(has(wordpiece.out, "wp.json': model.type = \"WordPiece\" is not supported"));
  auto unigram = run_loom("data encode --text " + text + " --tokenizer " +
                          t.write("ug.json", R"({"model": {"type": "Unigram", "vocab": []}})"));
  CHECK(unigram.rc == 2);
  CHECK(has(unigram.out, "model.type = \"Unigram\" is not supported"));
  auto broken =
      run_loom("data encode --text " + text + " --tokenizer " + t.write("b.json", "{\"model\": "));
  CHECK(broken.rc != 0);
  CHECK(has(broken.out, "b.json': not JSON"));
  auto empty = run_loom("data prepare --text " + t.write("empty.txt", "") + " --out " +
                        (t.path / "o").string());
  CHECK(empty.rc == 2);
  CHECK(has(empty.out, "the input has no tokens"));
}

TEST_CASE(
    "a run trains on BPE shards and samples through their tokenizer.json, and without one samples "
    "are refused") {
  TempDir t;
  const std::string text = corpus(t);
  REQUIRE(run_loom("data prepare --text " + text + " --out " + (t.path / "d").string() +
                   " --train-tokenizer --vocab-size 512")
              .rc == 0);
  const std::string cfg =
      t.write("c.toml",
              "[run]\nthreads = 1\n[model]\npreset = \"llama-tiny\"\nvocab_size = 512\n"
              "seq_len = 32\n[data]\ndir = \"" +
                  (t.path / "d").string() +
                  "\"\n[train]\nsteps = 4\nglobal_batch = 4\neval_every = 0\nsample_every = 4\n"
                  "sample_tokens = 12\nsample_prompt = \"The meaning of\"\n");
  auto r = run_loom("train " + cfg + " --run-dir " + (t.path / "run").string());
  INFO(r.out);
  REQUIRE(r.rc == 0);
  CHECK(has(r.out, "---- sample at step 4 ----\nThe meaning of"));
  std::filesystem::remove(t.path / "d" / "tokenizer.json");
  auto refused = run_loom("train " + cfg + " --run-dir " + (t.path / "run2").string());
  CHECK(refused.rc == 2);
  CHECK(has(refused.out, "sample_every > 0 with [model] vocab_size = 512 and no tokenizer"));
}
