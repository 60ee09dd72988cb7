// Under context parallelism a rank holds T / cp positions of each sequence: its batches cut to
// those positions, and the context plugin's metrics for the step's line.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "distributed/comm.hpp"
#include "train/pipeline.hpp"

namespace loom {
class ContextAttention;
}

namespace loom::train {

// Under cp, `read`'s whole sequences cut to this rank's positions; `read` itself otherwise.
BatchFn local_positions(const ContextAttention* cp, int64_t micro, BatchFn read);
// The context plugin's attention and exposed transfer time of the last step, and the spread of
// attention time over the cp group (its load balance).
void add_context_metrics(std::vector<std::pair<std::string, double>>& fields,
                         const ContextAttention* cp, dist::CommWorld* world);

}  // namespace loom::train
