// The cost model of `loom plan`: one layout of one model on one cluster -> predicted step time,
// broken into compute, each collective, the pipeline bubble and the optimizer, and memory per
// rank. It needs no trainer: the strategies' traffic comes from their plugins' cost entries
// (LOOM_PROC_COST) and the pipeline's shape from the schedule plugins, both through the two
// callbacks (plan/costing.hpp); plan/step.hpp works one layout out.
#pragma once

#include <loom/plugin.h>

#include <functional>
#include <string>
#include <vector>

#include "model/model.hpp"
#include "plan/cluster.hpp"
#include "plan/costing.hpp"
#include "train/layout_rules.hpp"

namespace loom::plan {

// Why a run of the layout would be refused, in the run's words (empty when it would start): the
// check `loom train` and `loom config check` make (train/layout_rules.hpp) with the plugins the
// layout names, and the schedule plugin's own plan. PluginSources::problems binds it.
using ProblemSource = std::function<std::string(const Workload& w, const Layout& l)>;

// A layout's facts for the run's check, with the built-in plugins in the slots the workload
// leaves to them and every capability granted (PluginSources::problems asks the real plugins).
train::LayoutFacts layout_facts(const Workload& w, const Layout& l);

// The planner's own limits (empty when a layout is within them): blocks >= pp x chunks, the
// zig-zag cp split, ZeRO only where a data group is, a schedule only with pp > 1.
std::string planner_limits(const Workload& w, const Layout& l);

// Why a layout cannot be costed (empty when it can): the planner's limits, then what any run of
// it would be refused for as layout_facts has it (the search asks the real plugins instead:
// planner_limits, then ProblemSource).
std::string invalid_reason(const Workload& w, const Layout& l);

Estimate estimate(const Cluster& c, const Workload& w, const Layout& l, const CostSource& costs,
                  const PipeSource& pipes);

// A uniform layout's average rank: n_layer / pp blocks and 1 / pp of the head.
StagePart average_part(const model::Config& m, const Layout& l);

// One pipeline stage of `part` on cluster `c` (a mixed cluster's group), the others as `l` has
// them: its forward and backward per micro-batch (in-loop communication and recompute included),
// what it adds after the loop (exposed data-parallel traffic, the optimizer, the step's
// overhead), and its memory with `in_flight` micro-batches' activations held.
StageEstimate estimate_stage(const Cluster& c, const Workload& w, const Layout& l,
                             const StagePart& part, int in_flight, const CostSource& costs);

}  // namespace loom::plan
