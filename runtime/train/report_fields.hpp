// Fields that one slot adds to a step's metrics line (docs/training.md lists them).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "distributed/comm_meter.hpp"
#include "model/model.hpp"
#include "train/pipeline.hpp"

namespace loom::train {

using Fields = std::vector<std::pair<std::string, double>>;

// The value of field `name` (NaN when the line has none).
double value_of(const Fields& f, const std::string& name);

// 1.2M, 3.4k, 512: counts in the log lines.
std::string human_count(double x);

// Model-state bytes this rank holds and bytes it sent: {param, grad, optim, comm buffer, comm};
// and activation_peak_bytes, the device's peak since the first forward (`peak_since_mark`) less
// that model state: the activations, saved and transient, and whatever else a step holds.
// Measured, where activation_bytes is the model's count of what it saves. The setup's peak (a
// data plugin sharding the runtime's full buffers) is before the mark.
void add_memory_metrics(Fields& f, const std::vector<int64_t>& accounting, int64_t peak_since_mark);
// Per MoE layer of this rank's stage: load balance, dropped share, the auxiliary losses and
// expert loads, over the whole batch (`sum_over_data` adds up the ranks that split it).
using SumOverData = std::function<void(double*, int64_t)>;
void add_moe_metrics(Fields& f, const model::Model& model, bool expert_parallel,
                     const SumOverData& sum_over_data);
// Every communicator's traffic this step (distributed/comm_meter.hpp): comm_ms and exposed_comm_ms
// over every group but pp, whose receives wait out the pipeline bubble too (pp_wait_ms);
// comm_bytes_all over all; and per group, exposed_comm_ms_<group> and comm_bytes_<group>. The data
// plugin's own figures follow as data_plugin_comm_ms and data_plugin_exposed_comm_ms.
void add_comm_metrics(Fields& f, const std::vector<dist::GroupTraffic>& traffic,
                      double data_plugin_comm_ms, double data_plugin_exposed_ms);
// The pipeline schedule as run on this rank (rank 0: the first stage, holding the most).
void add_pipeline_metrics(Fields& f, const PipeStepStats& st);

}  // namespace loom::train
