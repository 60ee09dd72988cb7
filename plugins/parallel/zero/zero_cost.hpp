// What ZeRO's collectives cost, for the planner: the plugin's cost entry (loom_cost_fn), by
// stage, as plain arithmetic over the query so that it reads beside the algorithm it prices.
#pragma once

#include <loom/sdk.hpp>
#include <vector>

#include "zero_parts.hpp"

namespace loom_zero {

// ZeRO's traffic (Rajbhandari et al. 2020; REFERENCE.md): stages 1 and 2 reduce-scatter the
// gradients and all-gather the updated parameters (2 psi, as DP); stage 1 once per step, stage
// 2 per micro-batch as units finish; stage 3 also gathers each unit before its forward and its
// backward (3 psi per micro-batch), prefetched behind compute.
inline std::vector<loom_cost_collective> zero_cost(int stage, const loom_cost_query& q,
                                                   const loom::sdk::Options& o) {
  using loom::sdk::collective;
  std::vector<loom_cost_collective> c;
  // Expert units are split over expert_dp (the ranks sharing those experts), the rest over
  // the whole data group. Parameters move as their gather_dtype (stages 1-2: 4-byte values),
  // gradients as their reduce_dtype;
  // stage 3's gathers hide behind the previous unit's compute only when prefetched.
  // Stages 2 and 3 move each unit (a block, the ends) as a collective of its own per
  // micro-batch, so each pays its latency: at small micro-batches over a wide group that is
  // what they cost, not the ring's bandwidth.
  const int64_t grad_width = width_of(wire_of(o.str("reduce_dtype")));
  const int64_t gather_width = stage == 3 ? width_of(wire_of(o.str("gather_dtype"))) : 4;
  const double gather_hidden = o.boolean("prefetch") ? 1.0 : 0.0;
  const bool update_overlap = o.boolean("gather_overlap");
  auto traffic = [&](int64_t params, int32_t group, const char* grads_what,
                     const char* gather_what) {
    if (params <= 0) return;
    const int64_t units = stage == 1 ? 1 : int64_t(q.layers) + 1, bytes = params * 4,
                  calls = stage == 1 ? 1 : q.microbatches * units;
    c.push_back(collective(LOOM_COST_REDUCE_SCATTER, LOOM_COST_BACKWARD,
                           params * grad_width / units, calls, 1.0, grads_what, group));
    if (stage < 3) {  // behind the next step's forward, or after the update
      c.push_back(update_overlap ? collective(LOOM_COST_ALL_GATHER, LOOM_COST_FORWARD, bytes, 1,
                                              1.0, gather_what, group)
                                 : collective(LOOM_COST_ALL_GATHER, LOOM_COST_STEP, bytes, 1, 0.0,
                                              gather_what, group));
    } else {
      for (loom_cost_phase phase : {LOOM_COST_FORWARD, LOOM_COST_BACKWARD})
        c.push_back(collective(LOOM_COST_ALL_GATHER, phase, params * gather_width / units, calls,
                               gather_hidden, gather_what, group));
    }
  };
  traffic(q.params - q.expert_params, 0, "gradient reduce-scatter", "parameter all-gather");
  if (q.expert_dp > 1)
    traffic(q.expert_params, q.expert_dp, "expert gradient reduce-scatter",
            "expert parameter all-gather");
  return c;
}

}  // namespace loom_zero
