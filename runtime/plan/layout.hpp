// One parallel layout as the planner names it ("dp4 tp2 pp2 zero1 mb2 1f1b"): the degrees, the
// ZeRO stage, the schedule and the recompute policy, and its name read back. Beneath the cluster
// description and the cost model, which both read layouts.
#pragma once

#include <string>

namespace loom::plan {

struct Workload;

struct Layout {
  int dp = 1, tp = 1, pp = 1, cp = 1, ep = 1;
  int zero = 0;         // 0 = ddp, 1..3 = ZeRO stage
  bool sp = false;      // sequence parallel beside tp
  int micro_batch = 1;  // sequences per forward/backward on one dp rank
  std::string schedule = "1f1b";
  int chunks = 1;  // interleaved: model chunks per pp rank
  std::string recompute = "none";
  int world() const { return dp * tp * pp * cp * ep; }
  int data_ranks() const { return dp * ep * cp; }  // the data slot's group, as MeshShape's
  // "dp4 tp2 pp2 zero1 mb2 1f1b" (what --explain and --fix read back)
  std::string name() const;
  // The data-slot plugin: ddp, zero1, zero2, zero3.
  std::string data_plugin() const { return zero ? "zero" + std::to_string(zero) : "ddp"; }
  std::string data_plugin(const Workload& w) const;  // the workload's own, if it names one
};

// Parses a name as Layout::name writes it ("tp=2 pp=2" and "tp2,pp2" work too). ConfigError.
Layout parse_layout(const std::string& text);

}  // namespace loom::plan
