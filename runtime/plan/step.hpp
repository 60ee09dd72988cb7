// The cost model's working for one layout (or one pipeline stage): the shared quantities first,
// then compute, parameters, collectives, the micro-batch loop, the data slot's overlap, the
// optimizer, memory and the headline figures, each a method estimate() calls in that order.
#pragma once

#include <loom/plugin.h>

#include <utility>
#include <vector>

#include "plan/cluster.hpp"
#include "plan/costing.hpp"

namespace loom::plan {

// Work of one transformer block on one rank for one micro-batch, forward only.
struct BlockWork {
  double gemm_flops = 0, gemm_calls = 0;
  double attn_flops = 0;  // causal: half the score matrix is computed
  double elem_bytes = 0, elem_calls = 0;
  double saved_elems = 0;     // activations kept for backward, no recompute
  double selective_drop = 0;  // of them, what selective recompute drops
  double norm_act_bytes = 0;  // what selective recompute redoes (norms, MLP activation)
};

// Per-rank compute rate: a device's peak, or on a CPU machine a share of what its cores deliver
// together. One rank runs every core's threads in one process (one core's figure x
// thread_scaling); several split the cores between them (the runtime gives each cores / ranks
// threads, one when there are more ranks than cores), every core busy as when one-thread
// processes run side by side (rank_scaling), and share it evenly.
struct Rates {
  double peak = 0, bytes = 0;  // FLOP/s and bytes/s of this rank
  double compute_scale = 1;    // the cluster's, for one rank or for several sharing the cores
};

// One layout's step, worked out in the order estimate() lists: the shared quantities first.
struct Step {
  const Cluster& c;
  const Workload& w;
  const Layout& l;
  const model::Config& m;
  const Rates r;
  const int act_bytes, grad_bytes, mbs, data_group;
  const double tokens, layers, moe_layers, vocab;
  const BlockWork dense, moe;
  double psi = 0, expert_psi = 0;                          // parameters this rank holds
  double f = 0, b = 0, rc = 0, f_attn = 0, head_gemm = 0;  // seconds per micro-batch
  double scores = 0;  // attention scores of one micro-batch in one block, on this rank
  double block_s = 0,
         head_s = 0;  // forward of one block (dense and MoE averaged) and of the whole head
  double loop_exposed[2] = {0, 0};  // in-loop comm per micro-batch: fwd, bwd
  PipeShape shape;
  Estimate e;

  const StagePart part;

  Step(const Cluster& c_, const Workload& w_, const Layout& l_, const StagePart& part_);

  // A BlockWork figure summed over this rank's blocks, dense and MoE.
  double mix(double BlockWork::*field) const {
    return (layers - moe_layers) * dense.*field + moe_layers * moe.*field;
  }
  double gemm(double flops, double calls) const {
    return calls * c.gemm_overhead + flops / (r.peak * c.gemm_eff);
  }
  double attn(double flops, double calls) const;
  double elem(double bytes, double calls) const {
    return calls * c.elementwise_overhead + bytes / (r.bytes * c.memory_eff);
  }

  // Forward, backward and recompute of one micro-batch through this rank's blocks and its share
  // of the head (the average rank's: 1 / pp; the pipeline's busiest is stage_imbalance()'s).
  void compute();

  // What the framework balances its stages by (Workload::stage_split).
  std::vector<double> split_costs() const;

  // The busiest rank's forward over the mean's: block_s per block, head_s for the head (the
  // embedding's lookup counts as nothing), summed over each rank's virtual stages.
  double stage_imbalance() const;

  // Parameters of this rank's part, / tp: its blocks, and the average rank's larger end (embedding
  // or head), or a stage's own (the last keeps a tied embedding for its head).
  void parameters();

  // A mesh axis' size and the rank stride between its members (tp -> cp -> ep -> dp -> pp).
  std::pair<int, int> axis_extent(int axis) const;

  loom_cost_query query() const;

  // Every strategy's collectives from its cost entry, timed on its link. Those inside the
  // micro-batch loop hide behind that phase's attention at most, and the rest lands on the loop.
  void collectives(const CostSource& costs);

  // The micro-batch loop: the schedule's makespan in chunk forwards, each as long as the busiest
  // rank's (its stages as the schedule plugin splits the layers); the rest is bubble.
  void loop(const PipeSource& pipes);

  // The data slot's collectives overlap the phase they run in (the last micro-batch's backward
  // for a once-a-step reduction). ZeRO-2/3's per-unit collectives are paced unit by unit: the
  // first unit's of each pass has nothing to hide behind, and each other unit's hides behind one
  // unit's compute of that phase, shared with the phase's other per-unit traffic. Every hidden
  // millisecond of any collective costs the cluster's overlap_cost of compute (contention_ms).
  // Returns the exposed part and the contention.
  double data_overlap();
  // A ZeRO-2/3 collective issued unit by unit (a block, or the ends) in each micro-batch.
  bool per_unit(const CommItem& it) const;

  // AdamW over this rank's shard: read p, g, m, v, write p, m, v (7 x 4 bytes), the grad norm
  // (a read of the gradients) and zeroing them.
  void optimizer();

  // Model states by the ZeRO formulas; activations as Loom's blocks keep them, for the
  // micro-batches in flight; buffers; the runtime's own.
  void memory();

  // The figures users compare: PaLM's FLOPs (no recompute), per device.
  void headline();
};

}  // namespace loom::plan
