// What the cost model reads and writes: the workload (model, batch, precision, plugins), an
// estimate and its parts, the callbacks through which the plugins answer for their traffic and
// schedules, a rank's or stage's share of the layers, and ZeRO's model-state formula.
#pragma once

#include <loom/plugin.h>

#include <functional>
#include <string>
#include <vector>

#include "model/config.hpp"
#include "plan/layout.hpp"

namespace loom::plan {

struct Workload {
  model::Config model;
  int64_t global_batch = 16;   // sequences per step
  std::string dtype = "fp32";  // fp32 | bf16 | fp16 | fp8: GEMM peak, and model-state formulas
  int grad_bytes =
      4;  // bytes per gradient element (fp32 masters; a data plugin may narrow its wire)
  // A plugin the config names for a slot that is not a built-in ("data" = "my_dp"): costed
  // through its own cost entry in every layout that uses the slot. The data slot's plugin then
  // holds the model state unsharded, as far as the planner knows.
  std::string data_plugin, tensor_plugin, sequence_plugin, context_plugin, expert_plugin;
  std::string device = "cpu";  // [run] device: what the layout's plugins must run on
  bool unfused_attention =
      false;  // scores written out (2021-22 Megatron); a flash kernel otherwise
  // How the framework splits layers over pipeline stages: "cost" (Loom: balanced by each layer's
  // FLOPs), "blocks" (Megatron-LM: equal blocks, the embedding and head on top of the ends),
  // "count" (Megatron-DeepSpeed's type:transformer|embedding: equal layers, E and L among them).
  std::string stage_split = "cost";
  std::string comm;  // [plugins] comm ("" = gloo, the default of a job of several ranks)
  bool comm_of_cluster = false;  // the cluster file's comm (on_cluster), not the config's
  // [plugins.zero3] prefetch_depth: the units ZeRO-3 gathers ahead, each a gathered copy held
  // (0 with prefetch = false).
  int zero3_prefetch_depth = 1;
};

// Micro-batches per step on one data-parallel rank.
inline int microbatches(const Workload& w, const Layout& l) {
  return int(w.global_batch / (int64_t(l.dp) * l.ep) / l.micro_batch);
}

// One collective of the step, as a plugin's cost entry gave it, with its predicted time.
struct CommItem {
  std::string plugin, what, op, phase, level;  // level: "node" | "network" | "node+network"
  int group = 1;
  double bytes = 0, calls = 0, hidden = 0, ms = 0, exposed_ms = 0;
};

struct Memory {
  double params = 0, grads = 0, optim = 0, activations = 0, buffers = 0, process = 0;
  double model_states() const { return params + grads + optim; }
  double total() const { return params + grads + optim + activations + buffers + process; }
};

struct Estimate {
  Layout layout;
  int microbatches = 1;
  double forward_ms = 0, backward_ms = 0, recompute_ms = 0;  // compute, per step, per rank
  double pipeline_ms = 0, bubble_ms = 0;  // the micro-batch loop, and its idle part
  double optimizer_ms = 0, overhead_ms = 0;
  double comm_ms = 0, exposed_comm_ms = 0;
  double contention_ms = 0;  // compute the hidden communication slows (Cluster::overlap_cost)
  double step_ms = 0;
  std::vector<CommItem> comms;
  Memory memory;
  bool fits = true;
  std::string why_not;
  double model_flops = 0;  // per step, PaLM's count (what MFU divides)
  double mfu = 0, tflops_per_device = 0, tokens_per_s_per_device = 0;
  std::vector<std::string> notes;  // e.g. a plugin without a cost entry
  // The step time measured runs on this cluster would put it in (plan/calibration.hpp); 0 when no
  // run was measured here. Why the layout lies outside what they cover ("" when inside).
  double band_low_ms = 0, band_high_ms = 0;
  std::string extrapolated;
};

// The step's collectives of one plugin for a query; empty when it has no cost entry.
using CostSource = std::function<std::vector<loom_cost_collective>(
    const std::string& plugin, const loom_cost_query& q, bool& has_entry)>;
// Simulated pipeline makespan in forward units (a forward of one chunk = 1, backward = k), the
// most micro-batch chunks in flight on the first rank, the most split backwards pending, and the
// schedule plugin's split of the layers (E, the blocks, L) into virtual stages, given each layer's
// cost (rank = stage % pp).
struct PipeShape {
  double makespan = 1;
  int in_flight = 1;
  int deferred = 0;  // split backwards whose weight action is pending at once, on any rank
  std::vector<int32_t> stage_of;
};
using PipeSource = std::function<PipeShape(const std::string& schedule, int pp, int m, int chunks,
                                           double k, const std::vector<double>& layer_costs)>;

// The layers one rank computes: a uniform layout's average rank (n_layer / pp blocks, 1 / pp of
// the head: what estimate() costs), or one stage of an uneven split (plan/mixed.hpp).
struct StagePart {
  double blocks = 0, moe_blocks = 0;
  double head_share = 0;             // the part of the head and loss it computes
  bool first = false, last = false;  // holds the embedding, the head (a stage only)
  bool average = true;
};

// One pipeline stage's times (estimate_stage).
struct StageEstimate {
  double forward_ms = 0, backward_ms = 0, recompute_ms = 0, after_loop_ms = 0;
  Estimate detail;  // comms, memory, fits, notes: as estimate() fills them, for this stage
};

// Model-state bytes per rank for psi parameters over n data-parallel ranks, by ZeRO stage
// (Rajbhandari et al. 2020): mixed precision 16 psi, 4 psi + 12 psi/n, 2 psi + 14 psi/n, 16 psi/n;
// fp32 (4 params, 4 grads, 8 Adam) 16 psi, 8 psi + 8 psi/n, 4 psi + 12 psi/n, 16 psi/n.
// out: params, grads, optimizer states.
void model_state_bytes(double psi, int n, int stage, bool mixed, double out[3]);

}  // namespace loom::plan
