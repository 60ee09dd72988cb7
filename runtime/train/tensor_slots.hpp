// The tensor and sequence slots as the trainer sees them: the layer API the model runs on (dense,
// or backed by the tp/sp plugins over the tp group) and the global gradient norm, which counts
// each sharded parameter's shards once across tp (experts: across ep) and each replicated
// parameter once.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "distributed/comm.hpp"
#include "loader/selection.hpp"
#include "model/config.hpp"
#include "parallel/layer_api.hpp"

namespace loom {
class ExpertDispatch;
class ContextAttention;
}  // namespace loom

namespace loom::train {

// The layer a parameter belongs to: "h3.mlp.fc.w" -> "h3" (block 3); wte, wpe -> "embedding";
// the final norm and LM head -> "head".
std::string layer_of(const std::string& param);

class TensorSlots {
 public:
  // `device` is [run] device: a tensor plugin's overlap = "auto" overlaps on "cuda" only.
  TensorSlots(const model::Config& mc, const std::string& device, const plugins::Selection& sel,
              dist::CommWorld* world, const loom_ops_v2* ops, GemmNumerics numerics);
  ~TensorSlots();
  LayerApi& api() { return *api_; }
  // The context slot (cp > 1), null otherwise.
  ContextAttention* context() { return context_.get(); }
  // sqrt(sum of squares of every gradient, each element of the global model counted once).
  double grad_norm(ParamStore& params) { return global_norm(params, &Param::grad); }
  // The same over the parameter values.
  double param_norm(ParamStore& params) { return global_norm(params, &Param::value); }
  // The norm from this rank's sums of squares {replicated parameters, tp-sharded parameters}:
  // the sharded part summed over tp, the total over pp.
  double norm_of(std::pair<double, double> sums);
  // The gradient norm of each layer ("embedding", "h3", "head"), counted as grad_norm counts
  // them; in model order. A collective over tp and ep.
  std::vector<std::pair<std::string, double>> layer_grad_norms(ParamStore& params);
  // Fails, naming the parameter, when a replicated parameter differs between tp ranks.
  void check_replicated(const ParamStore& params);

 private:
  double global_norm(ParamStore& params, Tensor Param::*which);
  double over_ep(double sum);
  void start_experts(const plugins::Selection& sel, int64_t experts);
  void start_context(const plugins::Selection& sel, int64_t seq_len);
  dist::CommWorld* world_;
  const loom_ops_v2* ops_;
  std::unique_ptr<plugins::Instance> tensor_, sequence_, expert_;
  std::unique_ptr<ExpertDispatch> dispatch_;
  std::unique_ptr<plugins::Instance> context_plugin_;
  std::unique_ptr<ContextAttention> context_;
  std::unique_ptr<LayerApi> api_;
};

}  // namespace loom::train
