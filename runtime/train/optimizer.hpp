// The optimizer as the step sees it, however the model state is held:
//   replicated  AdamW here over the flat buffers, after the data slot averaged the gradients
//               (ddp, or no data slot at all);
//   sharded     a ZeRO data plugin holds parameters, gradients and moments; the norms, the
//               AdamW step on its shard and the memory figures come from it.
// Every branch on the data slot's kind lives here, so the step never asks which it is.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/checkpointer.hpp"
#include "model/params.hpp"
#include "train/data_parallel.hpp"
#include "train/tensor_slots.hpp"

namespace loom::train {

struct AdamW {
  float beta1, beta2, eps, weight_decay, grad_clip;
};

class Optimizer {
 public:
  // `dp` may be null (one data rank).
  Optimizer(ParamStore& params, TensorSlots& slots, DataParallel* dp, const loom_ops_v2* ops,
            AdamW hp);

  bool sharded() const { return dp_ && dp_->sharded(); }
  // Global norms of the gradients (still carrying the step's carried_scale) and the values.
  double grad_norm();
  double param_norm();
  // Per-layer gradient norms, divided by `carried_scale`, for a spike's report; none when sharded
  // (no rank holds a layer's gradient whole).
  std::vector<std::pair<std::string, double>> layer_grad_norms(double carried_scale);
  // One pass over the gradients: divides `carried_scale` out, clips the global norm to grad_clip
  // (`grad_norm` is already unscaled) and takes an AdamW step at `lr`. A sharding plugin gets the
  // one factor as the ABI's grad_scale, which multiplies.
  void apply(double lr, double grad_norm, double carried_scale);
  // The data slot's hooks around a step: before its first forward, and after the update (taken
  // or skipped), where a replicated plugin sees the AdamW moments here and may rewrite them (a
  // sharded plugin owns its moments and gets no hooks).
  void before_forward() {
    if (dp_) dp_->before_forward();
  }
  void after_update(bool updated);
  // Optimizer steps taken (a skipped step does not advance AdamW's bias correction).
  int64_t& applied() { return applied_; }
  // {parameter, gradient, optimizer-state, comm-buffer bytes held; bytes sent last step}.
  std::vector<int64_t> accounting();
  // Fails, naming the odd ranks, when data-parallel replicas differ; a ZeRO-3 state has none.
  void check_replicas(const std::string& when);
  // Tensor-parallel replicas of replicated parameters (norms, row-parallel biases) agree.
  void check_tp_replicas();
  // The [faults] perturb: nudges this rank's copy of the first parameter element.
  void perturb_replica(float delta);

  // What a checkpoint saves and resume restores of the optimizer's: the parameters, the AdamW
  // moments here (empty when sharded) or the plugin's pieces, the plugin's own state, and the
  // applied updates. The run adds the precision slot's.
  ckpt::TrainingState checkpoint_state();

 private:
  ParamStore& params_;
  TensorSlots& slots_;
  DataParallel* dp_;
  const loom_ops_v2* ops_;
  AdamW hp_;
  Tensor m_, v_;
  int64_t applied_ = 0;
};

}  // namespace loom::train
