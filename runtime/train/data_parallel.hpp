// The data slot as the trainer sees it: the rank's place in the mesh, the comm world, and the
// data-parallel plugin that reduces gradients (told, layer by layer during the last micro-batch's
// backward, which gradients are final). A plugin that shards model state (ZeRO, the sharded kind)
// owns parameters, gradients and optimizer states: the model then runs through layer hooks that
// bind each layer's parameter views to what the plugin hands out, and the optimizer step, the
// norms and the memory figures come from the plugin.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "distributed/comm.hpp"
#include "loader/selection.hpp"
#include "model/model.hpp"

namespace loom::train {

// "rank 3", "ranks 0 and 1", "ranks 0, 2 and 5".
std::string describe_ranks(const std::vector<int>& ranks);

// Called with parameters whose gradient this rank has finished, before the data plugin reduces
// them (under ZeRO, per unit and micro-batch): where gradients that the tensor slot still owes a
// sum over tp (sequence parallelism's replicated parameters) get it, and where faults strike.
using GradsFinal = std::function<void(const std::vector<Param*>&)>;

class DataParallel {
 public:
  // Starts the data plugin over the model, on the data group of `world` (experts' gradients over
  // the dp axis when ep > 1); `microbatches` backward
  // passes make one step. Parameters named in `own_unit` get a sharding unit of their own (the
  // tied embedding under pp, so its shards line up on the two stages that hold it).
  DataParallel(const plugins::Selection& sel, dist::CommWorld& world, ParamStore& params,
               model::Model& model, int microbatches, const std::vector<std::string>& own_unit = {},
               GradsFinal before_reduce = {});
  ~DataParallel();

  // This rank's place in the data group (dp x ep: the ranks that split the batch) and its size.
  int data_rank() const;
  int data_size() const;
  // Tells the data plugin which gradients layer `i` finished.
  void after_layer(size_t i);
  // Waits for every gradient reduction; returns {comm_ms, exposed_comm_ms}.
  std::pair<double, double> finish();
  // Mean of a per-rank value over the data group.
  double mean_over_data(double v);
  // The world ranks of the dp replicas whose parameters differ from the majority's (checksum
  // of the parameters); both, when two replicas disagree. A collective over dp (and under ep
  // over the data group, for the parameters outside the experts). ZeRO-1/2 keep whole
  // parameters on every rank, so their replicas are compared too; ZeRO-3 has none.
  std::vector<int> odd_replicas(const ParamStore& params);
  // Whether there are replicas to compare: everything but ZeRO-3 keeps whole parameters.
  bool has_replicas() const { return stage_ < 3; }
  // Fails, naming the odd ranks, when the replicas' parameters differ; `when` says at what point.
  void check_identical(const ParamStore& params, const std::string& when);
  // "rank 1 differs from the other replicas; ...": which ranks, and what keeps replicas equal
  // (the data plugin, by name) so what to suspect, for the failure's message.
  std::string describe_mismatch(const std::vector<int>& odd) const;

  // The plugin's LOOM_DATA_HOOKS (ABI 3), each called when the plugin has it: before the step's
  // first forward, and after the update with the runtime's AdamW moments (replicated plugins).
  void before_forward();
  void after_update(bool updated, float* adam_m, float* adam_v, int64_t numel);
  // LOOM_DATA_DIVERGES: the replicas differ between the plugin's syncs.
  bool diverges() const { return (table_->capabilities & LOOM_DATA_DIVERGES) != 0; }
  // Whether the replicas' parameters should be equal after `step`: always, but for a diverging
  // plugin, only at its sync steps (0: before the first step).
  bool replicas_synced(int64_t step) const;

  // The ZeRO stage of a sharded plugin; 0 = replicated model state (ddp).
  int zero_stage() const { return stage_; }
  bool sharded() const { return stage_ > 0; }
  // Sharded: sums of squares over the whole data group of {replicated, tp-sharded} parameters'
  // gradients (which = 0) or values (1). A collective over the data group.
  std::pair<double, double> sum_squares(int which);
  // Sharded: the optimizer step on this rank's shard.
  void step(const loom_adamw& hp);
  // {param, grad, optimizer-state, comm-buffer bytes held; bytes sent last step}.
  std::vector<int64_t> accounting();
  // The plugin's own state for checkpoints; has_state: it has the entries.
  bool has_state() const;
  std::string name() const { return data_->desc()->name; }
  std::string save_state();
  void load_state(const std::string& bytes);
  // Sharded: this rank's pieces of parameters and moments (for checkpoints), and the call that
  // makes parameters whole again after a resume wrote into them.
  std::vector<loom_shard_piece> shard_pieces();
  void pieces_loaded();
  // Adds `delta` to this rank's copy of the first parameter element (the [faults] perturb):
  // the flat buffer, or under ZeRO-1/2 the plugin's whole-parameter replica.
  void nudge_replica(float delta);

 private:
  class Shards;
  std::vector<int> odd_in(dist::Communicator& group, double checksum);
  double checksum(const ParamStore& params, bool dense_only);
  void with_unit_values(int64_t u, const std::function<void(float*)>& use);
  void describe_params(const ParamStore& params, bool ep);
  void find_final_layers(model::Model& model, std::vector<size_t>& first_user);
  std::vector<int64_t> build_units(const ParamStore& params, model::Model& model,
                                   const std::vector<size_t>& first_user,
                                   const std::vector<std::string>& own_unit);
  void start_plugin(const plugins::SlotChoice& data, ParamStore& params, model::Model& model);
  void find_hooks();
  dist::CommWorld* world_;
  std::unique_ptr<plugins::Instance> data_;
  const loom_data_v2* table_ = nullptr;                  // the head both kinds share
  const loom_data_replicated_v2* replicated_ = nullptr;  // the kind this plugin is
  const loom_data_sharded_v2* sharded_ = nullptr;
  const loom_data_hooks* hooks_ = nullptr;  // LOOM_DATA_HOOKS, from an ABI 3 plugin
  std::vector<loom_param_info> infos_;
  std::vector<std::vector<int64_t>> final_after_;  // layer -> params whose gradient it completes
  std::vector<loom_data_unit> units_;
  std::vector<int32_t> flags_;
  std::vector<bool> expert_unit_;
  int stage_ = 0;
  std::unique_ptr<Shards> shards_;
};

}  // namespace loom::train
