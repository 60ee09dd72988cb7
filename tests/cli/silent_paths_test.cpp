// Paths that used to end in a crash, a silent success or a silent loss (the third fault battery):
// each now ends with a message that names the input, and writes nothing it should not.
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <filesystem>
#include <string>
#include <vector>

#include "support/process.hpp"

using loom::test::run_loom;
using loom::test::sh;
using loom::test::TempDir;
namespace fs = std::filesystem;

namespace {

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A one-step llama-tiny run with a checkpoint, over a few words prepared in `t`: the run dir.
std::string tiny_llama_run(const TempDir& t) {
  t.write("c.txt", "a few words of text to train on, repeated a few words of text to train on\n");
  REQUIRE(run_loom("data prepare --val-fraction 0 --text " + (t.path / "c.txt").string() +
                   " --out " + (t.path / "d").string())
              .rc == 0);
  const std::string cfg =
      t.write("l.toml",
              "[run]\nthreads = 1\n[model]\npreset = \"llama-tiny\"\nd_model = 32\nseq_len = 8\n"
              "vocab_size = 256\n[data]\ndir = \"" +
                  (t.path / "d").string() +
                  "\"\n[train]\nsteps = 1\n"
                  "global_batch = 1\neval_every = 0\n[checkpoint]\nevery = 1\n[plugins]\nckpt = "
                  "\"sync\"\n");
  const std::string run = (t.path / "run").string();
  auto r = run_loom("train " + cfg + " --run-dir " + run);
  INFO(r.out);
  REQUIRE(r.rc == 0);
  return run;
}

}  // namespace

TEST_CASE(
    "loom eval --text takes a regular file: a device or a FIFO is refused by name before anything "
    "is read") {
  TempDir t;
  const std::string run = tiny_llama_run(t);
  auto zero = run_loom("eval " + run + " --text /dev/zero");
  INFO(zero.out);
  CHECK(zero.rc == 1);
  CHECK(has(zero.out,
            "cannot read --text file '/dev/zero': it is a character device, not a regular file"));
  const std::string fifo = (t.path / "pipe").string();
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  auto pipe = run_loom("eval " + run + " --text " + fifo);
  CHECK(has(pipe.out, "'" + fifo + "': it is a FIFO, not a regular file"));
}

TEST_CASE("ckpt import refuses a config.json the model rules refuse, before writing anything") {
  TempDir t;
  const std::string run = tiny_llama_run(t);
  const std::string hf = (t.path / "hf").string();
  REQUIRE(run_loom("ckpt export " + run + "/checkpoints --format hf --out " + hf).rc == 0);
  const std::string python =
      "python3 -c \"import json,sys; p=sys.argv[1]+'/config.json'; c=json.load(open(p)); ";
  struct Case {
    std::string edit, message;
  };
  for (const Case& c :
       {Case{"c['rope_scaling']={'rope_type':'llama3','factor':0}",
             "[model.rope_scaling] factor = 0 must be at least 1"},
        Case{"c['rope_theta']=0", "[model] rope_theta = 0 must be positive"},
        Case{"c['max_position_embeddings']=0",
             "[model] seq_len: expected integer in [1, 1048576], got integer 0"},
        Case{"c['rms_norm_eps']=-1",
             "[model] norm_eps: expected float in [0, 1], got floating-point -1.0"},
        Case{"c['rope_scaling']='yes'",
             "\"rope_scaling\" is \"yes\"; config.json gives it as an object"},
        Case{"c=[c]", "holds a JSON array; a Hugging Face config.json is an object"}}) {
    const std::string bad = (t.path / "bad").string(), out = (t.path / "imported").string();
    fs::remove_all(bad);
    fs::copy(hf, bad);
    REQUIRE(sh(python + c.edit + "; json.dump(c, open(p, 'w'))\" " + bad).rc == 0);
    auto r = run_loom("ckpt import " + bad + " --out " + out);
    INFO(c.edit << "\n" << r.out);
    CHECK(r.rc != 0);
    CHECK(has(r.out, c.message));
    CHECK(!fs::exists(out));
  }
}

TEST_CASE(
    "ckpt export does not replace an earlier export unasked, and --force replaces it, leaving none "
    "of its files") {
  TempDir t;
  const std::string run = tiny_llama_run(t), out = (t.path / "hf").string(),
                    file = (t.path / "m.safetensors").string();
  REQUIRE(run_loom("ckpt export " + run + "/checkpoints --format hf --out " + out).rc == 0);
  t.write("hf/tokenizer_config.json", "{\"from\": \"an earlier export\"}");
  t.write("hf/notes.txt", "the user's own file");
  auto again = run_loom("ckpt export " + run + "/checkpoints --format hf --out " + out);
  INFO(again.out);
  CHECK(again.rc == 2);
  CHECK(has(again.out, "--out '" + out + "' is a folder that already holds "));
  CHECK(has(again.out, "give another --out, or --force to replace it"));
  CHECK(has(loom::test::read_text(fs::path(out) / "tokenizer_config.json"), "an earlier export"));
  auto forced =
      run_loom("ckpt export " + run + "/checkpoints --format hf --out " + out + " --force");
  INFO(forced.out);
  CHECK(forced.rc == 0);
  CHECK(!has(loom::test::read_text(fs::path(out) / "tokenizer_config.json"), "an earlier export"));
  CHECK(fs::exists(fs::path(out) / "notes.txt"));  // not an export's file: left alone
  REQUIRE(run_loom("ckpt export " + run + "/checkpoints --out " + file).rc == 0);
  auto file_again = run_loom("ckpt export " + run + "/checkpoints --out " + file);
  CHECK(file_again.rc == 2);
  CHECK(has(file_again.out,
            "--out '" + file + "' already exists: an export does not replace a file unasked"));
  CHECK(run_loom("ckpt export " + run + "/checkpoints --out " + file + " --force").rc == 0);
}

TEST_CASE(
    "every library in a plugin folder that is not loaded is named with its reason, by loom "
    "plugins, plugins info and train") {
  TempDir t;
  const fs::path dir = t.path / "plugins";
  fs::create_directories(dir);
  for (const auto& from : {fs::path(LOOM_ODD_PLUGIN_DIR), fs::path(LOOM_BROKEN_PLUGIN_DIR)})
    for (const auto& e : fs::directory_iterator(from))
      fs::copy(e.path(), dir / e.path().filename());
  fs::create_directories(dir / "libloom-precision-adir.so");
  REQUIRE(mkfifo((dir / "libloom-precision-fifo.so").c_str(), 0600) == 0);
  fs::create_symlink("libloom-precision-loop.so", dir / "libloom-precision-loop.so");
  const std::string at = dir.string() + "/libloom-precision-";
  const std::vector<std::string> reasons = {
      "'" + at + "adir.so' is a directory, not a plugin library",
      "'" + at + "fifo.so' is a FIFO, not a plugin library",
      "'" + at + "loop.so' is a link that leads to no file",
      "plugin library '" + at + "empty.so': its entry returned no plugins",
      "plugin library '" + at +
          "v1nullentry.so': entry 1 of the list its loom_plugin_entry_v1 returned is NULL",
      "plugin 'boomsbad' in '" + at + "onebad.so' is not exact",
      "plugin 'v1nine' in '" + at +
          "v1nine.so' was built for plugin ABI 1.9; ABI 1 ended at 1.8: this runtime reads ABI "
          "1.0-1.8",
      "plugin 'fp32' in '" + at + "impostor.so' is not exact"};
  const std::string env = "LOOM_PLUGIN_PATH=" + dir.string() + " timeout 120 ";
  auto listed = sh(env + LOOM_BIN " plugins");
  INFO(listed.out);
  CHECK(listed.rc == 0);
  for (const std::string& why : reasons) CHECK_MESSAGE(has(listed.out, "skipped: " + why), why);
  // A library with one bad descriptor keeps its good ones, and so do ABI 1 lists with a NULL.
  CHECK(has(listed.out, "boom           precision"));
  CHECK(has(listed.out, "v1good         precision"));
  auto boom = sh(env + LOOM_BIN " plugins info boom");
  INFO(boom.out);
  CHECK(boom.rc == 0);
  CHECK(has(boom.out, "boom — an exact precision"));
  CHECK(has(boom.out, "skipped: plugin 'boomsbad' in '" + at + "onebad.so'"));
  // What ABI 1's SDK filled for every plugin is not shown as provided when it saves nothing.
  auto quiet = sh(env + LOOM_BIN " plugins info v1quiet");
  INFO(quiet.out);
  CHECK(has(quiet.out, "provides:  no optional entries"));
  // train searches that folder first for every plugin it names (none of them is there), and
  // says once what it skipped.
  t.write("c.txt", "a few words of text to train on, repeated a few words of text to train on\n");
  REQUIRE(run_loom("data prepare --val-fraction 0 --text " + (t.path / "c.txt").string() +
                   " --out " + (t.path / "d").string())
              .rc == 0);
  const std::string cfg = t.write(
      "f.toml",
      "[model]\npreset = \"tiny\"\nseq_len = 8\n[data]\ndir = \"" + (t.path / "d").string() +
          "\"\n[train]\nsteps = 1\nglobal_batch = 2\neval_every = 0\n[parallel]\nnproc = 2\n");
  auto train = sh(env + LOOM_BIN " train " + cfg + " --run-dir " + (t.path / "r").string());
  INFO(train.out);
  CHECK(train.rc == 0);
  for (const std::string& why : reasons) {
    CHECK_MESSAGE(has(train.out, "loom: plugin search: skipped: " + why), why);
    const size_t first = train.out.find(why);
    CHECK_MESSAGE(train.out.find(why, first + 1) == std::string::npos, "said once: " << why);
  }
}
