// A training config as the planner sees it: the model, batch and precision (Workload), and the
// layout its [parallel], [plugins] and [train] sections ask for.
#pragma once

#include "config/config.hpp"
#include "plan/estimate.hpp"

namespace loom::plan {

// dtype "" = [plugins] precision. UsageError for a precision the planner does not know.
Workload workload_of(const config::Config& cfg, const std::string& dtype = "");
// dp "auto" resolves from [parallel] nproc; micro_batch 0 from the global batch.
Layout layout_of(const config::Config& cfg);

}  // namespace loom::plan
