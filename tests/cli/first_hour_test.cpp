// A newcomer's first hour: a run says when it saved nothing, `config check` refuses the data
// `train` would refuse, a resumed run's metrics hold one row per step, and `generate` samples as
// the training-time samples do.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>

#include "support/process.hpp"

using loom::test::read_text;
using loom::test::run_loom;
using loom::test::TempDir;
namespace fs = std::filesystem;

namespace {

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}
using loom::test::occurrences;

// Text prepared in `t` with a BPE tokenizer of `vocab` tokens learned from it: the data dir.
std::string bpe_data(const TempDir& t, int vocab) {
  std::string text;
  for (int i = 0; i < 300; ++i)
    text +=
        "a newcomer trains on her own notes, line " + std::to_string(i) + ", and reads them back\n";
  t.write("notes.txt", text);
  const std::string dir = (t.path / "d").string();
  auto r = run_loom("data prepare --text " + (t.path / "notes.txt").string() + " --out " + dir +
                    " --train-tokenizer --vocab-size " + std::to_string(vocab));
  REQUIRE_MESSAGE(r.rc == 0, r.out);
  return dir;
}

std::string config(const TempDir& t, const std::string& data, const std::string& extra) {
  return t.write("c.toml",
                 "[run]\nthreads = 1\n[model]\nn_layer = 1\nn_head = 2\nd_model = 16\nseq_len = "
                 "16\nvocab_size = 512\n"
                 "[data]\ndir = \"" +
                     data + "\"\n[train]\nglobal_batch = 2\neval_every = 0\n" + extra);
}

}  // namespace

TEST_CASE("a run that saved nothing says so on its done: line, and one that saved says where") {
  TempDir t;
  const std::string data = bpe_data(t, 300);
  auto bare = run_loom("train " + config(t, data, "steps = 2\n") + " --run-dir " +
                       (t.path / "bare").string());
  INFO(bare.out);
  CHECK(bare.rc == 0);
  CHECK(has(bare.out, "done: 2 steps, train loss"));
  CHECK(has(bare.out,
            "; nothing saved ([checkpoint] every = 0): loom eval, generate and export have no "
            "checkpoint to read"));
  const std::string cfg =
      config(t, data, "steps = 2\n[checkpoint]\nevery = 2\n[plugins]\nckpt = \"sync\"\n");
  auto saved = run_loom("train " + cfg + " --run-dir " + (t.path / "saved").string());
  INFO(saved.out);
  CHECK(has(saved.out, "; checkpoint of step 2 in " + (t.path / "saved" / "checkpoints").string()));
  // Its evaluation, read by a script (no terminal): the result line alone, no progress.
  auto eval =
      run_loom("eval " + (t.path / "saved").string() + " --data " + data + " --split train");
  INFO(eval.out);
  CHECK(eval.rc == 0);
  CHECK(has(eval.out, "mean loss"));
  CHECK_FALSE(has(eval.out, "eval: "));
}

TEST_CASE(
    "config check refuses what train refuses about the data: a tokenizer past vocab_size, a "
    "missing directory, an id past the vocabulary") {
  TempDir t;
  const std::string data = bpe_data(t, 1024);
  const std::string cfg =
      t.write("small.toml",
              "[model]\nn_layer = 1\nn_head = 2\nd_model = 16\nseq_len = 16\n[data]\ndir = \"" +
                  data + "\"\n[train]\nsteps = 1\nglobal_batch = 2\neval_every = 0\n");
  // What the tokenizer learned from this little text: fewer than the 1024 asked, more than 256.
  const std::string why = "[data] tokenizer '" + data + "/tokenizer.json' has ";
  const std::string past = " tokens, more than [model] vocab_size = 256; set [model] vocab_size = ";
  auto check = run_loom("config check " + cfg);
  auto train = run_loom("train " + cfg + " --run-dir " + (t.path / "r").string());
  INFO(check.out << "\n---\n" << train.out);
  CHECK(check.rc == 2);
  CHECK(train.rc == 2);
  CHECK(has(check.out, why));
  CHECK(has(train.out, why));
  CHECK(has(check.out, past));
  CHECK(has(train.out, past));
  CHECK(run_loom("config check " + cfg + " --set model.vocab_size=1024").rc == 0);
  CHECK(run_loom("config check " + cfg + " --no-data").rc == 0);  // the config alone
  auto missing =
      run_loom("config check " + cfg + " --set data.dir=" + (t.path / "nowhere").string());
  CHECK(missing.rc == 2);
  CHECK(has(missing.out, "[data] dir = \"" + (t.path / "nowhere").string() +
                             "\" does not exist; make it with: loom data prepare"));
  // Shards of ids up to 1023 under a tokenizer named elsewhere that fits: the ids themselves.
  fs::remove(fs::path(data) / "tokenizer.json");
  auto ids = run_loom("config check " + cfg);
  INFO(ids.out);
  CHECK(ids.rc == 2);
  CHECK(has(ids.out, "is outside the vocabulary (256)"));
}

TEST_CASE(
    "after a resume, metrics.jsonl holds one row per step, events.jsonl the resume, and doctor and "
    "done: count what ran") {
  TempDir t;
  const std::string data = bpe_data(t, 300);
  const std::string cfg =
      config(t, data, "steps = 12\n[checkpoint]\nevery = 4\n[plugins]\nckpt = \"sync\"\n");
  const std::string run = (t.path / "run").string();
  REQUIRE(run_loom("train " + cfg + " --run-dir " + run).rc == 0);
  // As if the run had died after step 12 with its last checkpoint at step 8: steps 9-12 again.
  auto resumed = run_loom("train " + cfg + " --run-dir " + run + " --set checkpoint.resume=" + run +
                          "/checkpoints/step-00000008");
  INFO(resumed.out);
  CHECK(resumed.rc == 0);
  CHECK(has(resumed.out, "done: steps 9-12 (4, resumed after step 8)"));
  const std::string metrics = read_text(fs::path(run) / "metrics.jsonl");
  CHECK(occurrences(metrics, "\"loss\"") == 12);
  for (int step = 1; step <= 12; ++step)
    CHECK(occurrences(metrics, "{\"step\": " + std::to_string(step) + ",") == 1);
  // The stopped run's rows of steps 9-12 are kept aside, not lost.
  CHECK(occurrences(read_text(fs::path(run) / "metrics.superseded.jsonl"), "\"loss\"") == 4);
  const std::string events = read_text(fs::path(run) / "events.jsonl");
  CHECK(occurrences(events, "\"event\": \"resume\"") == 1);
  CHECK(has(events,
            "{\"step\": 8, \"layer\": \"run\", \"event\": \"resume\", \"superseded_rows\": 4}"));
  auto doctor = run_loom("doctor " + run);
  INFO(doctor.out);
  CHECK(has(doctor.out, ": 12 steps (resumed after step 8), "));
}

TEST_CASE(
    "loom generate samples as training's samples do by default, and its help prints readable "
    "defaults") {
  auto help = run_loom("generate --help");
  INFO(help.out);
  CHECK(has(help.out, "--prompt arg (=a line break)"));
  CHECK(has(help.out, "--top-k arg (=8)"));
  CHECK_FALSE(has(help.out, "(=\n"));
}
