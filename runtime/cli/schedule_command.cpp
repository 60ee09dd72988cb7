// loom schedule --pp P --microbatches M --schedule NAME [--chunks V] [--backward-cost K]
// Prints a pipeline schedule's timeline before anyone spends a cluster hour on it.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "cli/parse.hpp"
#include "config/config.hpp"
#include "core/errors.hpp"
#include "loader/selection.hpp"
#include "parallel/pipeline_plan.hpp"

namespace loom::cli {

int schedule(const Args& args) {
  po::options_description opts("loom schedule");
  opts.add_options()("pp", po::value<int>()->required(), "pipeline stages (ranks)")(
      "microbatches", po::value<int>()->required(), "micro-batches per step")(
      "schedule", po::value<std::string>()->default_value("1f1b"), "gpipe | 1f1b | interleaved (a pipeline plugin)")(
      "chunks", po::value<int>()->default_value(0), "model chunks per rank; 0 = the schedule's default")(
      "backward-cost", po::value<double>()->default_value(1.0), "time units of a backward (a forward is 1)");
  po::variables_map vm;
  if (!parse(args, "loom schedule --pp P --microbatches M [--schedule NAME] [--chunks V] [--backward-cost K]",
             opts, {}, vm))
    return kExitOk;
  const int p = vm["pp"].as<int>(), m = vm["microbatches"].as<int>(), v = vm["chunks"].as<int>();
  const double backward = vm["backward-cost"].as<double>();
  if (p < 1 || m < 1 || v < 0) throw UsageError("need --pp >= 1, --microbatches >= 1, --chunks >= 0");
  // The simulation and the timeline grow faster than linearly with m; past a few thousand the
  // drawing is the same steady state repeated, and the bubble is (p - 1) / (m + p - 1) anyway.
  constexpr int kMaxMicrobatches = 4096;
  if (m > kMaxMicrobatches)
    throw UsageError("--microbatches " + std::to_string(m) + " is more than loom schedule draws (" +
                     std::to_string(kMaxMicrobatches) + "); the bubble of 1f1b and gpipe at m micro-batches is "
                     "(p - 1) / (m + p - 1), " + std::to_string(100.0 * (p - 1) / (m + p - 1)).substr(0, 6) + "% here");
  if (!(backward > 0) || !std::isfinite(backward)) throw UsageError("--backward-cost must be a positive number");
  // The same bounds as [parallel] pp and pp_chunks, and a drawing of at most 2^20 actions (its
  // simulation and timeline grow with p x m x v; past that it is the same steady state).
  if (p > 4096 || v > 64)
    throw UsageError("--pp " + std::to_string(p) + " --chunks " + std::to_string(v) +
                     ": loom schedule draws up to pp = 4096 and 64 chunks, the bounds [parallel] pp and pp_chunks take");
  if (static_cast<int64_t>(p) * m * std::max(v, 2) > (int64_t{1} << 20))
    throw UsageError("--pp " + std::to_string(p) + " x --microbatches " + std::to_string(m) + " x --chunks " +
                     std::to_string(std::max(v, 1)) + " is more actions than loom schedule draws (2^20)");
  const std::string name = vm["schedule"].as<std::string>();
  config::Config cfg = config::Config::parse("", "--schedule");
  plugins::Registry reg(plugins::Registry::default_dirs());
  plugins::Found found = reg.find(name, LOOM_KIND_PARALLEL);
  loom_options none = plugins::options_for(cfg, name);
  PipelinePlan plan(found, &none, loom_pipeline_shape{p, m, v});
  const auto& shape = plan.shape();
  PipeTimeline t = plan.simulate(1.0, backward);
  std::printf("%s: pp = %d, %d micro-batches, %d chunk%s per rank; F<m> = forward, B<m> = backward%s; "
              "a forward takes 1 time unit, a backward %g\n\n",
              plan.name().c_str(), shape.stages, shape.microbatches, shape.chunks, shape.chunks > 1 ? "s" : "",
              shape.chunks > 1 ? " of micro-batch m (.c = chunk c)" : " of micro-batch m", backward);
  std::printf("%s\n", plan.render(t).c_str());
  std::printf("step time: %g units; bubble %.1f%% of rank-time (theory (p-1)/(v m + p-1) = %.1f%%)\n",
              t.makespan, 100 * t.bubble(), 100 * plan.theoretical_bubble());
  std::printf("most micro-batch chunks holding activations at once, per rank:");
  for (int r = 0; r < shape.stages; ++r) std::printf(" %d", plan.peak_in_flight(r));
  std::printf("\n");
  return kExitOk;
}

}  // namespace loom::cli
