// A GPT-2-style decoder (pre-LN, learned positions, optionally tied embeddings) as a list of
// layers over one residual stream. A pipeline stage runs a contiguous range of these layers.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "gpt/config.hpp"
#include "gpt/layers.hpp"

namespace loom::gpt {

class Gpt {
 public:
  // Declares every parameter in `ps` (call ps.allocate afterwards); activations are sized for
  // up to `max_rows` = micro-batch x sequence length tokens.
  Gpt(const GptConfig& c, LayerApi& api, ParamStore& ps, int64_t max_rows, bool profile = false);

  const GptConfig& config() const { return c_; }
  LayerApi& api() { return api_; }
  std::vector<std::unique_ptr<Layer>>& layers() { return layers_; }

  // Forward through every layer; returns the sum of token losses (0 without targets).
  double forward(const Microbatch& mb);
  // Backward through every layer, accumulating into the parameter gradients; `after_layer(i)`
  // runs once layer i is done (how the data slot learns which gradients are final).
  void backward(const Microbatch& mb, const std::function<void(size_t)>& after_layer = {});
  // Activation bytes all layers keep for backward, for one micro-batch, on this rank.
  int64_t activation_bytes(const Microbatch& mb) const;
  // The head's logits of the last forward without targets: [rows, V_padded].
  const Tensor& logits() const { return head_->logits(); }

 private:
  GptConfig c_;
  LayerApi& api_;
  std::unique_ptr<Scratch> scratch_;
  std::vector<std::unique_ptr<Layer>> layers_;
  Head* head_ = nullptr;
  Tensor x_, dx_;
};

}  // namespace loom::gpt
