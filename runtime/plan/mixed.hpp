// The planner on a mixed cluster (plan/mixed_cluster.hpp). Loom's mesh gives every pipeline stage
// the same dp x tp x cp x ep, and pp is its outermost axis, so a group holds whole stages and
// only the pipeline's activations cross from one group to another: the smallest traffic a
// layout has. What the planner chooses is then the order of the groups along the pipeline and
// the layer split that balances each stage's time on its own devices.
//
// A stage's time per micro-batch t_s is estimate_stage's forward and backward on its group. A
// 1F1B or GPipe pipeline whose stages differ takes one micro-batch's trip through every stage
// and then one bottleneck period per micro-batch left:
//   pipeline = sum_s t_s + sum_boundaries x + (m - 1) max(max_s t_s, x)
// where x is a group boundary's activation send and its gradient's back, over [between]. With
// equal stages it is the usual (m + pp - 1) t.
#pragma once

#include <string>
#include <vector>

#include "plan/estimate.hpp"
#include "plan/mixed_cluster.hpp"
#include "plan/search.hpp"
#include "train/job_settings.hpp"

namespace loom::plan {

struct MixedStage {
  int group = 0;  // index into MixedCluster::groups
  int blocks = 0;
  bool first = false, last = false;
  double time_ms = 0;   // forward + backward per micro-batch
  double after_ms = 0;  // after the loop: exposed data-parallel traffic, optimizer, overhead
  Estimate detail;      // its memory, fits and comms
};

struct MixedEstimate {
  Layout layout;
  std::vector<int> order;  // the groups in node order: they hold the stages in this order
  std::string pp_layout;   // the split, as [parallel] pp_layout writes it ("E t t | t t L")
  std::vector<MixedStage> stages;
  double boundary_bytes = 0, boundary_ms = 0;  // per micro-batch one way, and x (both ways)
  double pipeline_ms = 0, step_ms = 0;
  bool fits = true;
  std::string why_not;
  double mfu = 0, tokens_per_s_per_device = 0;
  // The same layout and order with the split the schedule plugin makes when pp_layout is ""
  // (balanced by cost, as if the devices were alike).
  std::string uniform_pp_layout;
  double uniform_step_ms = 0;
};

struct MixedSearch {
  std::vector<MixedEstimate> ranked;  // fitting first, then by step time
  long considered = 0;
};

// One layout with the groups in `order`: the split `pp_layout`, or "" for the balanced one.
MixedEstimate estimate_mixed(const MixedCluster& mc, const Workload& w, const Layout& l,
                             const std::vector<int>& order, const std::string& pp_layout,
                             const CostSource& costs, const PipeSource& pipes);

// Every layout of all the cluster's devices whose stages fit the groups (1F1B and GPipe, one
// chunk per rank), in every group order, each with its balanced split.
MixedSearch search_mixed(const MixedCluster& mc, const Workload& w, const Fixed& fixed,
                         const CostSource& costs, const PipeSource& pipes,
                         const ProblemSource& problems);

// What --explain prints: each stage on its group, the split against the uniform one, and why the
// groups meet where they do.
std::string explain_mixed(const MixedCluster& mc, const MixedEstimate& e);

// The figures a run prints beside what it measures ([run] plan_cluster): the step, the largest
// stage's memory and exposed communication, marked extrapolated (no calibration spans groups).
Estimate summary_of(const MixedEstimate& e);

// [parallel] groups for an order ("fast nodes=1"), as --emit writes them.
std::vector<std::string> group_entries(const MixedCluster& mc, const std::vector<int>& order);

// [run] plan_cluster on a mixed cluster: the config's layout, [parallel] groups (by name) and
// pp_layout. ConfigError when its groups are not the cluster's.
MixedEstimate predict_mixed(const MixedCluster& mc, const train::JobSettings& job, int world);

}  // namespace loom::plan
