// A decoder-only transformer, GPT-2 to Llama (pre-norm; learned, rotary or no positions;
// multi-head or grouped-query attention; optionally tied embeddings) as a list of layers over
// one residual stream. A pipeline stage runs a contiguous range of these layers.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "gpt/layers.hpp"
#include "gpt/moe.hpp"
#include "model/config.hpp"

namespace loom::gpt {

class Gpt : public model::Model {
 public:
  // Declares the parameters of the layers it builds in `ps` (call ps.allocate afterwards);
  // activations are sized for up to `max_rows` = micro-batch x sequence length tokens. Layers are
  // numbered 0 (embedding), 1..n_layer (blocks), n_layer + 1 (head); `only` lists the ones this
  // rank builds (a pipeline stage's), ascending; empty = all of them.
  Gpt(const model::Config& c, LayerApi& api, ParamStore& ps, int64_t max_rows, bool profile = false,
      const std::vector<int>& only = {});

  const model::Config& config() const override { return c_; }
  LayerApi& api() override { return api_; }
  std::vector<std::unique_ptr<Layer>>& layers() { return layers_; }
  // The model-wide number of each entry of layers().
  const std::vector<int>& numbers() const { return numbers_; }
  bool has_head() const override { return head_ != nullptr; }
  // Sum of token losses of the head's last forward.
  double head_loss() const override;
  // The MoE layers this rank builds, with their block names ("h3").
  std::vector<std::pair<std::string, MoeMlp*>> moe_layers() const;
  std::vector<std::pair<std::string, model::RoutedLayer*>> routed_layers() const override;
  size_t layer_count() const override { return layers_.size(); }
  int layer_number(size_t i) const override { return numbers_[i]; }
  const std::string& layer_name(size_t i) const override { return layers_[i]->name(); }
  const std::vector<Param*>& layer_params(size_t i) const override { return layers_[i]->params(); }
  int64_t layer_saved_bytes(size_t i, const Microbatch& mb) const override {
    return layers_[i]->saved_bytes(mb);
  }
  // What the MoE layers' auxiliary losses added to the objective in their last forward.
  double aux_objective() const;
  // Forward / backward of layers()[first, last) on the residual stream the caller holds.
  void forward_range(const Microbatch& mb, Tensor& x, size_t first, size_t last) override;
  void backward_range(const Microbatch& mb, Tensor& dx, size_t first, size_t last,
                      const std::function<void(size_t)>& after_layer = {}) override;
  void backward_input_range(const Microbatch& mb, Tensor& dx, size_t first, size_t last,
                            std::vector<DeferredWeightGrads>& deferred) override;
  void weight_range(std::vector<DeferredWeightGrads>& deferred, size_t first, size_t last,
                    const std::function<void(size_t)>& after_layer) override;
  // Layers [first, last) keep the activations of their next forward and backward in slot k.
  void use_slot(int k, size_t first, size_t last) override;
  // Hooks run around every layer's forward and backward from now on (null: none).
  void set_hooks(LayerHooks* hooks) override { hooks_ = hooks; }

  // Forward through every layer; returns the sum of token losses (0 without targets).
  double forward(const Microbatch& mb) override;
  // Backward through every layer, accumulating into the parameter gradients; `after_layer(i)`
  // runs once layer i is done (how the data slot learns which gradients are final).
  void backward(const Microbatch& mb, const std::function<void(size_t)>& after_layer = {}) override;
  // Activation bytes all layers keep for backward, for one micro-batch, on this rank, plus the
  // activations recomputing blocks share ([model] recompute).
  int64_t activation_bytes(const Microbatch& mb) const override;
  // The head's logits of the last forward without targets: [rows, V_padded].
  const Tensor& logits() const override { return head_->logits(); }

  // Generation of one sequence with a key/value cache of `capacity` positions (0: back to
  // training). decode() runs the next `n` tokens of the sequence; logits() then holds the rows
  // of its last piece (n % max_rows(), or max_rows()).
  void use_kv_cache(int64_t capacity) override;
  void decode(const int32_t* tokens, int64_t n) override;
  int64_t decoded() const override { return kv_.empty() ? 0 : kv_.front().length; }
  // The most rows one forward can hold (micro-batch x the positions held here).
  int64_t max_rows() const override { return x_.dim(0); }

 private:
  model::Config c_;
  LayerApi& api_;
  std::unique_ptr<Scratch> scratch_;
  std::unique_ptr<RopeTables> rope_;
  std::unique_ptr<RecomputeScratch> recompute_;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<int> numbers_;
  Head* head_ = nullptr;
  LayerHooks* hooks_ = nullptr;
  Tensor x_, dx_;
  std::vector<KvCache> kv_;  // one per block, generating
};

}  // namespace loom::gpt
