// loom schedule --pp P --microbatches M --schedule NAME [--chunks V] [--backward-cost K]
// [--weight-share S] Prints a pipeline schedule's timeline before anyone spends a cluster hour on
// it.
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
      "schedule", po::value<std::string>()->default_value("1f1b"),
      "gpipe | 1f1b | interleaved | zbh1 (a pipeline plugin)")(
      "chunks", po::value<int>()->default_value(0),
      "model chunks per rank; 0 = the schedule's default")(
      "backward-cost", po::value<double>()->default_value(2.0),
      "time units of a backward (a forward is 1; a backward does twice its GEMM FLOPs)")(
      "weight-share", po::value<double>()->default_value(0.5),
      "of a split backward (zbh1), the share its weight-gradient half W takes");
  po::variables_map vm;
  if (!parse(args,
             "loom schedule --pp P --microbatches M [--schedule NAME] [--chunks V] "
             "[--backward-cost K] [--weight-share S]",
             opts, {}, vm))
    return kExitOk;
  const int p = vm["pp"].as<int>(), m = vm["microbatches"].as<int>(), v = vm["chunks"].as<int>();
  const double backward = vm["backward-cost"].as<double>(), share = vm["weight-share"].as<double>();
  if (p < 1 || m < 1 || v < 0)
    throw UsageError("need --pp >= 1, --microbatches >= 1, --chunks >= 0");
  // The simulation and the timeline grow faster than linearly with m; past a few thousand the
  // drawing is the same steady state repeated, and the bubble is (p - 1) / (m + p - 1) anyway.
  constexpr int kMaxMicrobatches = 4096;
  if (m > kMaxMicrobatches)
    throw UsageError("--microbatches " + std::to_string(m) + " is more than loom schedule draws (" +
                     std::to_string(kMaxMicrobatches) +
                     "); the bubble of 1f1b and gpipe at m micro-batches is "
                     "(p - 1) / (m + p - 1), " +
                     std::to_string(100.0 * (p - 1) / (m + p - 1)).substr(0, 6) + "% here");
  if (!(backward > 0) || !std::isfinite(backward))
    throw UsageError("--backward-cost must be a positive number");
  if (!(share > 0 && share < 1)) throw UsageError("--weight-share must be between 0 and 1");
  // The same bounds as [parallel] pp and pp_chunks, and a drawing of at most 2^20 actions (its
  // simulation and timeline grow with p x m x v; past that it is the same steady state).
  if (p > 4096 || v > 64)
    throw UsageError("--pp " + std::to_string(p) + " --chunks " + std::to_string(v) +
                     ": loom schedule draws up to pp = 4096 and 64 chunks, the bounds [parallel] "
                     "pp and pp_chunks take");
  if (static_cast<int64_t>(p) * m * std::max(v, 2) > (int64_t{1} << 20))
    throw UsageError("--pp " + std::to_string(p) + " x --microbatches " + std::to_string(m) +
                     " x --chunks " + std::to_string(std::max(v, 1)) +
                     " is more actions than loom schedule draws (2^20)");
  const std::string name = vm["schedule"].as<std::string>();
  config::Config cfg = config::Config::parse("", "--schedule");
  plugins::Registry reg(plugins::Registry::default_dirs());
  plugins::Found found = reg.find(name, LOOM_KIND_PARALLEL);
  loom_options none = plugins::options_for(cfg, name);
  PipelinePlan plan(found, &none, loom_pipeline_shape{p, m, v});
  const auto& shape = plan.shape();
  PipeTimeline t = plan.simulate(1.0, backward, share);
  const bool split = plan.split(0, 0, 0);
  char weight[48] = "";
  if (split) std::snprintf(weight, sizeof weight, " (W %g of it)", backward * share);
  std::printf(
      "%s: pp = %d, %d micro-batches, %d chunk%s per rank; F<m> = forward, B<m> = backward%s%s; "
      "a forward takes 1 time unit, a backward %g%s\n\n",
      plan.name().c_str(), shape.stages, shape.microbatches, shape.chunks,
      shape.chunks > 1 ? "s" : "", split ? " of the input, W<m> = the weight gradients" : "",
      shape.chunks > 1 ? " of micro-batch m (.c = chunk c)" : " of micro-batch m", backward,
      weight);
  std::printf("%s\n", plan.render(t).c_str());
  std::printf(
      "step time: %g units; bubble %.1f%% of rank-time, %g units idle per rank "
      "(theory without split backwards (p-1)/(v m + p-1) = %.1f%%, (p-1)(1 + backward) = %g "
      "units)\n",
      t.makespan, 100 * t.bubble(), t.makespan * t.bubble(), 100 * plan.theoretical_bubble(),
      (shape.stages - 1) * (1 + backward));
  std::printf("most micro-batch chunks holding activations at once, per rank:");
  for (int r = 0; r < shape.stages; ++r) std::printf(" %d", plan.peak_in_flight(r));
  std::printf("\n");
  return kExitOk;
}

}  // namespace loom::cli
