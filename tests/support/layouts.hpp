// Equivalence tests across parallel layouts: one tiny corpus and config, trained under several
// layouts, each run's per-step loss and grad norm read back from its metrics.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "support/metrics.hpp"
#include "support/process.hpp"

namespace loom::test {

struct Curves {
  std::vector<double> loss, grad_norm;
  std::filesystem::path metrics;  // the run's metrics.jsonl, for other columns
  std::string out;                // what the run printed
};

class LayoutRuns {
 public:
  // `model` and `train` are TOML lines for those sections (the rest is fixed and tiny).
  LayoutRuns(const std::string& model, const std::string& train, const std::string& plugins = "") {
    std::string text;
    for (int i = 0; i < 500; ++i)
      text += "every parallel layout trains the same model, step after step " +
              std::to_string(i % 13) + "\n";
    t_.write("c.txt", text);
    auto prep = run_loom("data prepare --text " + (t_.path / "c.txt").string() + " --out " +
                         (t_.path / "d").string());
    REQUIRE(prep.rc == 0);
    cfg_ = t_.write("e.toml", "[run]\nthreads = 1\npeak_gflops = 10\n[model]\n" + model +
                                  "\n[data]\ndir = \"" + (t_.path / "d").string() +
                                  "\"\n[train]\n" + train + "\neval_every = 0\n" + plugins);
  }

  // Trains with extra --set flags (e.g. "--set parallel.nproc=2"), under `launcher` if given;
  // REQUIREs success.
  Curves run(const std::string& sets, const std::string& launcher = "") {
    std::string dir = (t_.path / ("run" + std::to_string(runs_++))).string();
    auto r = run_loom("train " + cfg_ + " --run-dir " + dir + " " + sets, "", launcher);
    INFO(sets << "\n" << r.out);
    REQUIRE(r.rc == 0);
    auto metrics = std::filesystem::path(dir) / "metrics.jsonl";
    return {column(metrics, "loss"), column(metrics, "grad_norm"), metrics, r.out};
  }

  // Trains without checking the result. Each call gets a run directory of its own (a fresh run
  // is refused where an earlier one left its metrics), except a resume, which continues in the
  // previous call's.
  Result raw(const std::string& sets, const std::string& launcher = "") {
    if (sets.find("checkpoint.resume") == std::string::npos) ++raws_;
    return run_loom("train " + cfg_ + " --run-dir " + raw_dir().string() + " " + sets, "",
                    launcher);
  }
  const std::string& config() const { return cfg_; }
  // Where the last raw() run wrote.
  std::filesystem::path raw_dir() const { return t_.path / ("x" + std::to_string(raws_)); }

 private:
  TempDir t_;
  std::string cfg_;
  int runs_ = 0, raws_ = 0;
};

// Every step's loss and grad norm within `rtol` (relative) of the reference run.
// The text of a run's sample at `step` (between its header line and the closing "----"), with
// the launcher's rank prefixes taken out.
inline std::string sample_text(const std::string& out, int step) {
  const size_t at = out.find("---- sample at step " + std::to_string(step) + " ----");
  REQUIRE(at != std::string::npos);
  const size_t begin = out.find('\n', at) + 1;
  std::string text = out.substr(begin, out.find("----", begin) - begin);
  for (size_t p; (p = text.find("[rank 0] ")) != std::string::npos;) text.erase(p, 9);
  return text;
}

// Greedy text samples at step 10, 40 tokens after "The".
inline const char* kGreedySample =
    " --set train.sample_every=10 --set train.sample_top_k=1 --set train.sample_tokens=40 --set "
    "train.sample_prompt=The";

inline void check_same(const Curves& ref, const Curves& got, double rtol, const std::string& what) {
  REQUIRE(got.loss.size() == ref.loss.size());
  for (size_t s = 0; s < ref.loss.size(); ++s) {
    INFO(what << ", step " << s + 1 << ": loss " << got.loss[s] << " vs " << ref.loss[s]
              << ", grad norm " << got.grad_norm[s] << " vs " << ref.grad_norm[s]);
    CHECK(std::fabs(got.loss[s] - ref.loss[s]) <= rtol * std::fabs(ref.loss[s]));
    CHECK(std::fabs(got.grad_norm[s] - ref.grad_norm[s]) <= rtol * std::fabs(ref.grad_norm[s]));
  }
}

// A MoE layout routes as the reference run does: every step drops the same share of MoE layer
// `layer`'s assignments and sends expert 0 the same load.
inline void check_same_routing(const Curves& ref, const Curves& got, const std::string& layer) {
  CHECK(column(got.metrics, "moe." + layer + ".dropped") ==
        column(ref.metrics, "moe." + layer + ".dropped"));
  CHECK(column(got.metrics, "moe." + layer + ".load.0") ==
        column(ref.metrics, "moe." + layer + ".load.0"));
}

// Every step of `resumed` equals the same step of `full`, to the bit.
inline void check_bitwise(const Curves& full, const Curves& resumed) {
  REQUIRE(resumed.loss.size() == full.loss.size());
  for (size_t s = 0; s < full.loss.size(); ++s) {
    INFO("step " << s + 1);
    CHECK(resumed.loss[s] == full.loss[s]);
    CHECK(resumed.grad_norm[s] == full.grad_norm[s]);
  }
}

// Trains under `from` to step `at`, saving a sync checkpoint there, then resumes it under `from`
// and under each of `to`: every resumed run matches the `from` one within `rtol`.
inline void check_reshard(LayoutRuns& runs, const std::string& from, int at,
                          const std::vector<std::string>& to, double rtol) {
  TempDir t;
  const std::string ck = " --set checkpoint.dir=" + (t.path / "ck").string();
  const std::string n = std::to_string(at);
  REQUIRE(runs.raw(from + " --set plugins.ckpt=sync --set checkpoint.every=" + n +
                   " --set train.exit_after=" + n + ck)
              .rc == 0);
  Curves same = runs.run(from + ck + " --set checkpoint.resume=latest");
  for (const auto& layout : to)
    check_same(same, runs.run(layout + ck + " --set checkpoint.resume=latest"), rtol,
               from + " -> " + layout);
}

}  // namespace loom::test
