// What a layout needs of the model, the batch, the device and the plugins in its slots: one check,
// made the same way by `loom train` at start-up, by `loom config check`, and by `loom plan` for
// every layout it would rank. So the planner never recommends a layout that training refuses, and
// config check refuses what training would, in the same words.
//
// The schedule plugin's own refusals (an interleaved schedule whose micro-batches are not a
// multiple of pp, more stages than layers) come from the plugin itself: train and config check
// plan the pipeline (plan_pipeline), and the planner builds the same PipelinePlan.
#pragma once

#include <cstdint>
#include <string>

#include "distributed/mesh.hpp"
#include "distributed/node_groups.hpp"
#include "loader/selection.hpp"
#include "model/model.hpp"
#include "train/job_settings.hpp"
#include "train/settings.hpp"

namespace loom::train {

struct LayoutFacts {
  const model::Config* model = nullptr;
  dist::MeshShape mesh;
  int64_t global_batch = 0;
  int64_t micro_batch = 0;  // 0 = the whole per-rank batch
  std::string device = "cpu";
  bool device_host_memory =
      true;  // host code reaches the device's memory (ops::declared_host_reachable)
  int64_t device_memory = 0;  // [run] device_memory_mib, in bytes (0: no cap)
  // The plugin filling each slot ("" = none).
  std::string comm, data, tensor, sequence, context, expert, pipeline;
  bool comm_p2p = true;       // the comm plugin has send and recv and declares LOOM_COMM_P2P
  bool comm_send = true;      // its table has send and recv, declared or not
  std::string comm_declared;  // plugins::declared_note of the comm plugin
  uint64_t data_caps = 0;     // the data plugin's LOOM_DATA_* capabilities
  std::string data_declared;  // plugins::declared_note of the data plugin
  std::vector<dist::NodeGroup> groups;  // [parallel] groups, in node order
  int nproc = 1;                        // ranks per node
};

// Empty when the layout can run; otherwise the reason, as train's ConfigError says it.
std::string layout_problem(const LayoutFacts& f);

// The facts of a resolved config (after default_plugins), as a run on `mesh` sees them.
LayoutFacts facts_of(const JobSettings& job, const plugins::Selection& selection,
                     const dist::MeshShape& mesh);

// A plugin's facts for the slots that have some: whether a comm plugin declares send and recv, and
// a data plugin's capabilities with their note. For the planner, which has descriptors, not a
// Selection.
void comm_facts(LayoutFacts& f, const loom_plugin* comm);
void data_facts(LayoutFacts& f, const loom_plugin* data);

// The [train] settings once the layout passed layout_problem, with micro_batch (0 = the whole
// per-rank batch) and accum filled in. check_layout adds the pipeline plan; a Run plans it with
// its model.
Settings settle_layout(const JobSettings& job, const plugins::Selection& selection,
                       const dist::MeshShape& mesh);

// What every rank would refuse, checked once by the local launcher before it starts them: the
// batch split over dp and micro-batches, and the pipeline schedule and layer split.
void check_layout(const JobSettings& job, const plugins::Selection& selection,
                  const dist::MeshShape& mesh);

}  // namespace loom::train
