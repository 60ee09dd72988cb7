// A mixture-of-experts MLP (Shazeer et al. 2017; Switch, GShard): a linear router with softmax,
// top-k experts per token with renormalised weights, E expert MLPs of the dense MLP's shape, a
// capacity per expert (or none: dropless), and the load-balancing and router z auxiliary losses.
//
// Routing groups are single sequences (GShard's groups): capacity and the load-balancing
// statistics are each sequence's own, so they do not depend on how a layout cuts the batch into
// micro-batches or ranks, and every layout trains the same model. Routing is deterministic: ties
// between experts go to the lower index, and an expert over capacity keeps a sequence's
// assignments in position order (then by rank within the token's top k), so every run of the
// same batch drops the same tokens. A dropped assignment contributes nothing; the
// token's residual stream passes it by.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "gpt/layer_parts.hpp"
#include "model/config.hpp"
#include "model/model.hpp"

namespace loom::gpt {

using MoeStats = model::RoutingStats;

class MoeMlp : public model::RoutedLayer {
 public:
  // Declares the router and the experts' parameters (`prefix` "h3.moe.") into `owner`.
  MoeMlp(const std::string& prefix, const model::Config& c, LayerApi& api, ParamStore& ps,
         std::vector<Param*>& owner, int64_t rows);
  ~MoeMlp();
  // y[N, C] = sum over each token's kept experts of weight x expert(h); h is the normed input,
  // N / T sequences of T rows each (the positions of each sequence this rank holds).
  void forward(const Tensor& h, Tensor& y, int64_t T);
  // dh[N, C] = d(loss)/dh for dy = d(loss)/dy, accumulating parameter gradients. `dloss` is the
  // weight of one token's loss in the step (the auxiliary losses' gradients scale with it).
  void backward(const Tensor& h, const Tensor& dy, Tensor& dh, float dloss);
  void use_slot(int k);
  int64_t saved_bytes(int64_t rows) const;
  const MoeStats& stats() const override { return stats_; }
  void reset_stats() override;
  // Off: route dropless whatever the config says (evaluation, samples), so the outcome does not
  // depend on how many sequences share a micro-batch.
  void use_capacity(bool on) override { capacity_on_ = on; }
  // aux_coef x aux + z_coef x z of the last forward: what the auxiliary losses add to the
  // objective (per token of the micro-batch, as the mean cross-entropy).
  double aux_objective() const;

 private:
  struct Acts;
  struct Choices;
  void route(const Tensor& h, int64_t T, Acts& a);
  void choose_experts(const Tensor& h, int64_t T, Acts& a);
  void keep_within_capacity(const Choices& seqs, Acts& a);
  void combine(Acts& a, Tensor& y) const;
  void record_stats(const Acts& a);
  void experts_backward(const Acts& a, Tensor& dye, Tensor& dxin);
  void router_backward(const Tensor& h, const Acts& a, const Tensor& dw, Tensor& dh, float dloss);
  const model::Config& c_;
  LayerApi& api_;
  Param *router_, *fc_w_, *fc_b_ = nullptr, *out_w_, *out_b_ = nullptr;  // biases: [model] bias
  std::unique_ptr<Slots<Acts>> acts_;
  MoeStats stats_;
  double last_aux_ = 0, last_z_ = 0;
  bool capacity_on_ = true;
};

}  // namespace loom::gpt
