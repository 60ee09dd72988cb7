// Training data at scale: shards are mapped, so a rank's memory does not grow with the split;
// llm.c's shard names ("corpus_train_000000.bin") load as they are; epoch sampling gives the same
// model under every layout.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <set>
#include <sstream>

#include "support/layouts.hpp"

using namespace loom::test;
namespace fs = std::filesystem;

namespace {

// An llm.c shard of `tokens` zeros (a sparse file: nothing is written but the header).
void zero_shard(const fs::path& path, int64_t tokens) {
  int32_t header[256] = {20240520, 1, static_cast<int32_t>(tokens)};
  int fd = ::open(path.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
  REQUIRE(fd >= 0);
  REQUIRE(::write(fd, header, sizeof header) == static_cast<ssize_t>(sizeof header));
  REQUIRE(::ftruncate(fd, 1024 + 2 * tokens) == 0);
  ::close(fd);
}

}  // namespace

TEST_CASE("a 200M-token training split costs a rank no more memory than a 1M-token one") {
  TempDir t;
  for (auto [name, n] :
       {std::pair{"small", int64_t{1'000'000}}, std::pair{"large", int64_t{200'000'000}}}) {
    fs::create_directories(t.path / name);
    zero_shard(t.path / name / "corpus_train_000000.bin", n);
  }
  const std::string cfg =
      t.write("c.toml",
              "[run]\nthreads = 1\n[model]\npreset = \"llama-tiny\"\nseq_len = 64\n"
              "[train]\nsteps = 3\nglobal_batch = 4\neval_every = 0\n");
  double peak[2];
  int i = 0;
  for (const char* name : {"small", "large"}) {
    const std::string dir = (t.path / (std::string("run-") + name)).string();
    auto r = run_loom("train " + cfg + " --run-dir " + dir +
                      " --set data.dir=" + (t.path / name).string());
    INFO(r.out);
    REQUIRE(r.rc == 0);
    peak[i++] = column(fs::path(dir) / "metrics.jsonl", "peak_mem_bytes").back();
  }
  INFO("peak RSS (VmHWM) " << peak[0] / (1 << 20) << " MiB with 1M tokens, " << peak[1] / (1 << 20)
                           << " MiB with 200M");
  CHECK(peak[1] - peak[0] < 8.0 * (1 << 20));
}

TEST_CASE("epoch sampling trains the same model on one rank, dp = 2 and dp2 x tp2") {
  LayoutRuns runs("preset = \"llama-tiny\"\nseq_len = 16",
                  "steps = 10\nglobal_batch = 4\nlr = 3e-3\nwarmup_steps = 2");
  Curves one = runs.run("--set parallel.nproc=1 --set data.sampling=epoch");
  for (const char* layout :
       {"--set parallel.nproc=2", "--set parallel.nproc=4 --set parallel.tp=2"})
    check_same(one, runs.run(std::string(layout) + " --set data.sampling=epoch"), 1e-5, layout);
  Curves random = runs.run("--set parallel.nproc=1 --set data.sampling=random");
  CHECK(random.loss[3] != one.loss[3]);  // the two orders differ
}

TEST_CASE(
    "the validation loss is the same under one rank, micro_batch 4, dp 2, tp 2, pp 2 and cp 2") {
  LayoutRuns runs("preset = \"llama-tiny\"\nseq_len = 16",
                  "steps = 4\nglobal_batch = 8\nlr = 3e-3\nwarmup_steps = 1");
  const std::string eval = " --set train.eval_every=2 --set train.eval_batches=2";
  const auto val = [&](const std::string& layout) {
    return column(runs.run(layout + eval).metrics, "val_loss");
  };
  const std::vector<double> one = val("--set parallel.nproc=1");
  REQUIRE(one.size() == 4);  // before the first update, steps 1, 2, 4
  for (const char* layout : {"--set parallel.nproc=1 --set train.micro_batch=4",
                             "--set parallel.nproc=2", "--set parallel.nproc=2 --set parallel.tp=2",
                             "--set parallel.nproc=2 --set parallel.pp=2 --set train.micro_batch=2",
                             "--set parallel.nproc=2 --set parallel.cp=2"}) {
    const std::vector<double> got = val(layout);
    INFO(layout);
    REQUIRE(got.size() == one.size());
    for (size_t i = 0; i < one.size(); ++i) CHECK(got[i] == doctest::Approx(one[i]).epsilon(1e-5));
  }
}

namespace {

// Each rank's trace (LOOM_DATA_TRACE): "step sample source offset" lines, merged and sorted.
std::vector<std::string> traced(const fs::path& dir) {
  std::set<std::string> lines;
  for (const auto& e : fs::directory_iterator(dir)) {
    std::istringstream in(read_text(e.path()));
    for (std::string line; std::getline(in, line);) lines.insert(line);
  }
  std::vector<std::string> out(lines.begin(), lines.end());
  std::sort(out.begin(), out.end(), [](const std::string& a, const std::string& b) {
    return std::make_pair(std::stoll(a), std::stoll(a.substr(a.find('\t')))) <
           std::make_pair(std::stoll(b), std::stoll(b.substr(b.find('\t'))));
  });
  return out;
}

}  // namespace

TEST_CASE(
    "a 0.25 / 0.75 blend: shares within a point over 400 steps, the same windows at dp1, dp2 and "
    "pp2, a bitwise resume, spikes named by source") {
  TempDir t;
  std::string a, b;
  for (int i = 0; i < 300; ++i) a += "source a, line " + std::to_string(i) + ": code code code\n";
  for (int i = 0; i < 300; ++i)
    b += "source b, line " + std::to_string(i) + ": web pages and prose\n";
  for (const auto& [name, text] : {std::pair{"a", a}, std::pair{"b", b}})
    REQUIRE(run_loom("data prepare --text " + t.write(std::string(name) + ".txt", text) +
                     " --out " + (t.path / name).string())
                .rc == 0);
  const std::string cfg = t.write(
      "blend.toml",
      "[run]\nthreads = 1\npeak_gflops = 10\n[model]\npreset = \"llama-tiny\"\nseq_len = 16\n"
      "[data]\nblend = [\"" +
          (t.path / "a").string() + "\", \"" + (t.path / "b").string() +
          "\"]\nweights = [0.25, 0.75]\n[train]\nsteps = 400\nglobal_batch = 4\nlr = 3e-3\n"
          "warmup_steps = 2\neval_every = 0\n[faults]\nbad_batch_step = 300\n");
  int runs = 0;
  auto train = [&](const std::string& sets, const fs::path& run_dir) {
    const fs::path trace = t.path / ("trace" + std::to_string(runs++));
    fs::create_directories(trace);
    auto r = run_loom("train " + cfg + " --run-dir " + run_dir.string() + " " + sets,
                      "LOOM_DATA_TRACE=" + trace.string());
    INFO(sets << "\n" << r.out);
    REQUIRE(r.rc == 0);
    return trace;
  };
  const std::vector<std::string> one = traced(train("", t.path / "one"));
  REQUIRE(one.size() == 1600);
  int64_t from_a = 0;
  for (const std::string& line : one) {
    std::istringstream fields(line);
    int64_t step, sample, source;
    fields >> step >> sample >> source;
    from_a += source == 0;
  }
  INFO("source a's share: " << from_a / 16.0 << "%");
  CHECK(std::abs(from_a / 1600.0 - 0.25) < 0.01);
  const fs::path metrics = t.path / "one" / "metrics.jsonl";
  CHECK(column(metrics, "tokens.a").back() == from_a * 16);
  CHECK(column(metrics, "tokens.b").back() == (1600 - from_a) * 16);
  const std::vector<double> loss = column(metrics, "loss");
  // The spike of step 300's scrambled batch names each sample's source with its offset.
  const std::string events = read_text(t.path / "one" / "events.jsonl");
  CHECK(occurrences(events, "\"batch_step\": 300") > 0);
  CHECK(occurrences(events, "\"sources\": [\"") > 0);
  for (const char* layout :
       {"--set parallel.nproc=2",
        "--set parallel.nproc=2 --set parallel.pp=2 --set train.micro_batch=2"}) {
    const fs::path dir = t.path / ("layout" + std::to_string(runs));
    CHECK_MESSAGE(traced(train(layout, dir)) == one, layout);
    const std::vector<double> got = column(dir / "metrics.jsonl", "loss");
    REQUIRE(got.size() == loss.size());
    for (size_t i = 0; i < 20; ++i)
      CHECK_MESSAGE(got[i] == doctest::Approx(loss[i]).epsilon(1e-5),
                    layout);  // fp32 sums drift apart later
  }
  const std::string ck = "--set plugins.ckpt=sync --set checkpoint.every=200 ";
  const fs::path first = train(ck + "--set train.exit_after=200", t.path / "resumed");
  const fs::path second = train(ck + "--set checkpoint.resume=latest", t.path / "resumed");
  std::vector<std::string> both = traced(first), rest = traced(second);
  CHECK(both.size() == 800);
  both.insert(both.end(), rest.begin(), rest.end());
  CHECK(both == one);
  CHECK(column(t.path / "resumed" / "metrics.jsonl", "loss") == loss);  // bitwise
}
