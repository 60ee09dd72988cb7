// A pipeline schedule as the runtime holds it: the pipeline plugin's layer split and every pp
// rank's action order, checked before the first step, and simulated in unit time for
// `loom schedule` and the bubble tables.
//
// Execution rules (docs/pipeline.md): a rank runs its actions in order; a forward of virtual
// stage s > 0 first waits for its input from stage s - 1, and sends its output to stage s + 1
// without waiting; a backward waits for its gradient from stage s + 1 and sends to s - 1 the
// same way; a weight action (the second half of a split backward) waits for nothing but its own
// backward, earlier on the rank. Sends never block, and sends and receives go in paired groups
// (exchanges), so the order is deadlock-free exactly when the simulation below, which follows
// the same rules, finishes.
#pragma once

#include <loom/plugin.h>

#include <memory>
#include <string>
#include <vector>

#include "loader/registry.hpp"

namespace loom {

struct PipeSpan {
  loom_pipe_action action;
  double start, end;
};

struct PipeTimeline {
  std::vector<std::vector<PipeSpan>> ranks;  // per pp rank, in execution order
  double makespan = 0;
  // Idle time over (ranks x makespan): the simulated bubble fraction.
  double bubble() const;
};

// One paired exchange of a step: the sends and receives a pp rank issues together (one comm
// group), at a point of the unit-time timeline. Every message sits in the exchange at the end
// time of the action that produces it, on the sender and on the receiver alike, so a rank's
// exchange at point t holds, towards each neighbour, the mirror of that neighbour's exchange at
// t (and the k-th exchanges two neighbours share pair up): on a backend whose unmatched send
// holds up its stream (NCCL), the groups can never wait on each other in a cycle.
struct PipeExchange {
  double at = 0;  // the timeline point
  size_t before =
      0;  // issued before this rank's action `before` (actions().size(): after the last)
  std::vector<size_t> sends;  // this rank's actions whose output goes out here
  std::vector<size_t> recvs;  // this rank's actions whose input comes in here
};

class PipelinePlan {
 public:
  // Configures the schedule for `shape` (chunks 0 = the schedule's default), asks it for every
  // rank's actions and checks them. Throws ConfigError for a shape the schedule refuses and
  // RuntimeError for an order that is incomplete or would deadlock.
  PipelinePlan(const plugins::Found& plugin, const loom_options* options,
               loom_pipeline_shape shape);
  ~PipelinePlan();

  const std::string& name() const { return name_; }
  const loom_pipeline_shape& shape() const { return shape_; }
  int virtual_stages() const { return shape_.stages * shape_.chunks; }
  int virtual_stage(int rank, int chunk) const { return chunk * shape_.stages + rank; }
  const std::vector<loom_pipe_action>& actions(int rank) const { return actions_[rank]; }
  // The plugin's split of layers (kinds 'E' / 't' / 'L', relative costs) into virtual stages.
  std::vector<int32_t> partition(const std::string& kinds, const std::vector<double>& costs,
                                 const std::string& layout) const;

  // Every rank's actions run under the execution rules, a forward taking `forward_cost` and a
  // backward `backward_cost`, transfers free. A split backward's weight action takes
  // `weight_share` of it and its input-gradient half the rest.
  PipeTimeline simulate(double forward_cost = 1, double backward_cost = 1,
                        double weight_share = 0.5) const;
  // Rank `rank`'s exchanges of a step, in the order it issues them (PipeExchange).
  std::vector<PipeExchange> exchanges(int rank) const;
  // Whether rank `rank` splits the backward of (micro-batch, chunk): its list holds a weight
  // action.
  bool split(int rank, int microbatch, int chunk) const;
  // The most micro-batch chunks rank `rank` holds activations for at once (forwarded, not yet
  // backwarded; a split backward's weight action keeps only its GEMMs' operands).
  int peak_in_flight(int rank) const;
  // The most backwards rank `rank` holds split at once (input gradient done, weight action not
  // yet): each keeps copies of its GEMMs' operands until its weight action runs.
  int peak_deferred(int rank) const;
  // The theoretical bubble fraction (p-1)/(v m + p-1) (REFERENCE.md, pipelines).
  double theoretical_bubble() const;
  // The timeline as text: one row per rank, one column per time unit, "F3" / "B3" / "W3" (".c" =
  // chunk).
  std::string render(const PipeTimeline& t) const;

 private:
  void check();
  std::unique_ptr<plugins::Instance> plugin_;
  const loom_pipeline_v2* table_ = nullptr;
  std::string name_;
  loom_pipeline_shape shape_;
  std::vector<std::vector<loom_pipe_action>> actions_;
  std::vector<std::vector<bool>> split_;  // per rank, per chunk * m + micro-batch
};

}  // namespace loom
