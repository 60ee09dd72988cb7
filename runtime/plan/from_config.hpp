// A training config as the planner sees it: the model, batch and precision (Workload), and the
// layout its [parallel], [plugins] and [train] sections ask for.
#pragma once

#include "plan/cluster.hpp"
#include "plan/estimate.hpp"
#include "train/job_settings.hpp"

namespace loom::plan {

// dtype "" = [plugins] precision. UsageError for a precision the planner does not know.
Workload workload_of(const train::JobSettings& job, const std::string& dtype = "");
// The workload as a run on `c` would be: a GPU cluster's device and comm ([cluster] device and
// comm) replace the config's; a CPU cluster keeps the config's (cpu or strict, and its comm).
Workload on_cluster(Workload w, const Cluster& c);
// dp "auto" resolves from the world (0: [parallel] nproc); micro_batch 0 from the global batch.
Layout layout_of(const train::JobSettings& job, int world = 0);

// The --set overrides that turn a config of workload `w` into one that runs layout `l` (the
// inverse of layout_of): [parallel] degrees and nproc, the slots' plugins (the workload's own where
// it names some), [train] micro_batch and [model] recompute.
std::vector<std::string> layout_sets(const Workload& w, const Layout& l);

}  // namespace loom::plan
