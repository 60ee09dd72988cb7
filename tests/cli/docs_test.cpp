// Scripts the docs hand to users, run as written: every ```sh block of the guides that is marked
// `<!-- runnable -->` (at the small sizes its marker names), and the sbatch requeue script of
// docs/cluster.md, which reaches `scontrol requeue` when the step is preempted.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "support/process.hpp"

using loom::test::read_text;
using loom::test::sh;
using loom::test::TempDir;
namespace fs = std::filesystem;

namespace {

// The ```sh block of `doc` that holds `marker`.
std::string snippet(const std::string& doc, const std::string& marker) {
  const std::string text = read_text(doc);
  const size_t at = text.find(marker);
  REQUIRE(at != std::string::npos);
  const size_t begin = text.rfind("```sh\n", at) + 6, end = text.find("```", at);
  return text.substr(begin, end - begin);
}

// A block a guide marks `<!-- runnable -->`, or `<!-- runnable, at small sizes: "a" => "b"; ...
// -->`: its text with the substitutions made, in the order given.
struct Runnable {
  std::string where, text;
};

std::vector<Runnable> runnable_blocks(const std::string& doc) {
  const std::string text = read_text(std::string(LOOM_SOURCE_DIR) + "/" + doc);
  std::vector<Runnable> out;
  for (size_t at = text.find("<!-- runnable"); at != std::string::npos;
       at = text.find("<!-- runnable", at + 1)) {
    const size_t close = text.find("-->", at), fence = text.find("\n```sh\n", close);
    REQUIRE_MESSAGE(fence == text.find('\n', close),
                    doc << ": a runnable marker must stand on the line before a ```sh block");
    const size_t begin = fence + 7, end = text.find("\n```", begin);
    Runnable r{
        doc + ":" + std::to_string(1 + std::count(text.begin(), text.begin() + long(begin), '\n')),
        text.substr(begin, end - begin + 1)};
    const std::string marker = text.substr(at, close - at);
    for (size_t q = marker.find('"'); q != std::string::npos; q = marker.find('"', q + 1)) {
      const size_t q2 = marker.find('"', q + 1), arrow = marker.find("=> \"", q2),
                   q4 = marker.find('"', arrow + 4);
      const std::string from = marker.substr(q + 1, q2 - q - 1),
                        to = marker.substr(arrow + 4, q4 - arrow - 4);
      const size_t hit = r.text.find(from);
      REQUIRE_MESSAGE(hit != std::string::npos,
                      r.where << ": the marker's \"" << from << "\" is not in the block");
      r.text.replace(hit, from.size(), to);
      q = q4;
    }
    out.push_back(r);
  }
  return out;
}

// What a block expects to find where it runs, made the way a user would have it: a Hugging Face
// Llama that transformers saved (with its tokenizer), and some text of one's own.
void fixtures_for(const Runnable& r, const TempDir& t) {
  fs::create_symlink(fs::path(LOOM_SOURCE_DIR) / "configs", t.path / "configs");
  if (r.text.find("my-llama") != std::string::npos) {
    auto made = sh(std::string(LOOM_SOURCE_DIR) + "/.venv/bin/python " + LOOM_SOURCE_DIR +
                   "/tests/reference/hf_reference.py make llama " + (t.path / "my-llama").string() +
                   " tokenizer");
    REQUIRE_MESSAGE(made.rc == 0, made.out);
  }
  if (r.text.find("notes/") != std::string::npos) {
    fs::create_directories(t.path / "notes");
    std::string a, b;
    for (int i = 0; i < 120; ++i)
      a += "Meeting notes, Monday: the team met at " + std::to_string(9 + i % 8) +
           " and agreed on the plan.\n";
    for (int i = 0; i < 120; ++i)
      b += "Friday: we shipped item " + std::to_string(i) +
           ", tested it, and wrote the notes down.\n";
    t.write("notes/monday.txt", a);
    t.write("notes/friday.txt", b);
  }
}

// Runs a block in `t` as a user's shell would: loom on the PATH, python3 the one with transformers.
loom::test::Result run_block(const Runnable& r, const TempDir& t) {
  t.write("block.sh", "set -euo pipefail\n" + r.text);
  const std::string bin = fs::path(LOOM_BIN).parent_path().string();
  return sh("cd " + t.path.string() + " && PATH=" + bin + ":" + LOOM_SOURCE_DIR +
            "/.venv/bin:$PATH timeout 600 bash block.sh");
}

}  // namespace

TEST_CASE(
    "every shell block of the guides is marked runnable, or says why the docs test does not run "
    "it") {
  for (const char* doc :
       {"README.md", "docs/checkpoints.md", "docs/configuration.md", "docs/cluster.md"}) {
    const std::string text = read_text(std::string(LOOM_SOURCE_DIR) + "/" + doc);
    for (size_t at = text.find("\n```sh\n"); at != std::string::npos;
         at = text.find("\n```sh\n", text.find("\n```", at + 7) + 1)) {
      const std::string before =
          text.substr(text.rfind('\n', at - 1) + 1, at - text.rfind('\n', at - 1) - 1);
      INFO(doc << ":" << 1 + std::count(text.begin(), text.begin() + long(at), '\n') << ": "
               << before);
      CHECK((before.rfind("<!-- runnable", 0) == 0 || before.rfind("<!-- not run", 0) == 0));
    }
  }
}

TEST_CASE(
    "every block the guides mark runnable runs as written, the fine-tuning example end to end") {
  std::vector<Runnable> blocks;
  for (const char* doc :
       {"README.md", "docs/checkpoints.md", "docs/configuration.md", "docs/cluster.md"})
    for (const Runnable& r : runnable_blocks(doc)) blocks.push_back(r);
  bool finetune = false;
  for (const Runnable& r : blocks) {
    TempDir t;
    fixtures_for(r, t);
    const loom::test::Result done = run_block(r, t);
    INFO(r.where << ":\n" << r.text << "\n---\n" << done.out);
    CHECK(done.rc == 0);
    if (r.text.find("finetune.toml") == std::string::npos) continue;
    finetune = true;
    // Fine-tuned at dp 2 for its steps, saved where the example looks, exported with the context
    // the imported model stated (64), not the run's seq_len (32), and read back by transformers.
    CHECK(loom::test::occurrences(read_text(t.path / "runs/finetune/metrics.jsonl"), "\"loss\"") ==
          4);
    const auto config = nlohmann::json::parse(read_text(t.path / "my-llama-notes/config.json"));
    CHECK(config["max_position_embeddings"] == 64);
    CHECK(nlohmann::json::parse(read_text(
              t.path / "my-llama-notes/tokenizer_config.json"))["model_max_length"] == 64);
    CHECK(done.out.find("mesh: 2 ranks") != std::string::npos);
    CHECK(done.out.find("Meeting notes, Monday:") != std::string::npos);
  }
  CHECK(finetune);
  CHECK(blocks.size() >= 2);
}

TEST_CASE(
    "the documented requeue script requeues a preempted job, whether the step or the batch shell "
    "gets SIGTERM") {
  TempDir t;
  t.write("job.sh", snippet(LOOM_SOURCE_DIR "/docs/cluster.md", "# Requeue on preemption"));
  // srun stands in for the job step: it runs until SIGTERM, then exits 3 as a loom that saved
  // its step does (or at once with STUB_EXIT); scontrol records what it was asked.
  t.write("srun",
          "#!/bin/bash\n[ -n \"${STUB_EXIT:-}\" ] && exit $STUB_EXIT\ntrap 'exit 3' TERM\nwhile :; "
          "do sleep 0.1; done\n");
  t.write("scontrol", "#!/bin/bash\necho \"$*\" >> \"$STUB_LOG\"\n");
  const std::string dir = t.path.string();
  sh("chmod +x " + dir + "/srun " + dir + "/scontrol");
  const std::string env = "PATH=" + dir + ":$PATH SLURM_JOB_ID=42 STUB_LOG=" + dir + "/log ";

  auto exited = sh(env + "STUB_EXIT=3 bash " + dir + "/job.sh");
  CHECK(exited.rc == 3);
  CHECK(read_text(t.path / "log") == "requeue 42\n");

  sh("rm -f " + dir + "/log");
  sh("(" + env + "bash " + dir + "/job.sh; echo $? > " + dir +
     "/rc) > /dev/null 2>&1 & echo $! > " + dir + "/pid");
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  sh("kill -TERM $(pgrep -f '^bash " + dir + "/job.sh')");
  for (int i = 0; i < 100 && read_text(t.path / "rc").empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK(read_text(t.path / "rc") == "3\n");
  CHECK(read_text(t.path / "log") == "requeue 42\n");

  auto failed = sh(env + "STUB_EXIT=1 bash " + dir + "/job.sh");
  CHECK(failed.rc == 1);
  CHECK(read_text(t.path / "log") == "requeue 42\n");  // a failure is not requeued
}
