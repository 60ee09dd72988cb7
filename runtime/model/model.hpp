// The runtime's one view of a model: what the trainer, the data slot, the pipeline, generation
// and the reporters call, and the shape description (Config) that the planner, checkpoints and
// import/export read (model/config.hpp). The decoder in models/gpt implements it; runtime code
// includes this header and never names the implementation.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "model/config.hpp"
#include "model/params.hpp"
#include "tensor/tensor.hpp"

namespace loom {
class LayerApi;
class DeferredWeightGrads;
}  // namespace loom

namespace loom::model {

struct Microbatch {
  const int32_t* tokens = nullptr;   // [B, T]
  const int32_t* targets = nullptr;  // [B, T]; null for inference (the head keeps the logits)
  int64_t B = 0, T = 0;
  // Gradient weight of each token's loss: 1 / (tokens in the global batch). 0 = forward only.
  float dloss = 0.f;
  int64_t rows() const { return B * T; }
};

// Called around each layer's forward and backward (by layer index on this rank): how a data
// slot that shards model state (ZeRO) gathers parameters just in time and collects each layer's
// gradients as it finishes.
class LayerHooks {
 public:
  virtual ~LayerHooks() = default;
  virtual void before_forward(size_t layer) = 0;
  virtual void after_forward(size_t layer) = 0;
  virtual void before_backward(size_t layer) = 0;
  virtual void after_backward(size_t layer) = 0;
  // A split backward (zero-bubble schedules) runs before_backward, the input-gradient half and
  // after_backward_input (the parameters are not needed any more, the gradients are still open);
  // later before_backward_weight, the weight-gradient GEMMs and after_backward_weight (they are
  // done for this micro-batch).
  virtual void after_backward_input(size_t layer) = 0;
  virtual void before_backward_weight(size_t layer) = 0;
  virtual void after_backward_weight(size_t layer) = 0;
};

// What a routed (mixture-of-experts) layer saw of this rank's tokens since the last reset. Sums,
// so the ranks that split a batch add theirs up to the batch's (train/report_fields.cpp).
struct RoutingStats {
  std::vector<int64_t> load;  // assignments routed to each expert, before capacity
  int64_t assignments = 0, dropped = 0, tokens = 0;
  double aux = 0, z = 0;     // over tokens: their sequence's load-balancing loss, their lse^2
  double all_to_all_ms = 0;  // in the expert slot's collectives (ep > 1), forward and backward
};

class RoutedLayer {
 public:
  virtual ~RoutedLayer() = default;
  virtual const RoutingStats& stats() const = 0;
  virtual void reset_stats() = 0;
  // Off: route dropless whatever the config says (evaluation, samples), so the outcome does not
  // depend on how many sequences share a micro-batch.
  virtual void use_capacity(bool on) = 0;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const Config& config() const = 0;
  virtual LayerApi& api() = 0;

  // The layers this rank holds, in model order: model-wide number (0 embedding, 1..n_layer
  // blocks, n_layer + 1 head), name, the parameters each reads (a tied embedding appears in both
  // layers that use it), and the activation bytes each keeps for backward.
  virtual size_t layer_count() const = 0;
  virtual int layer_number(size_t i) const = 0;
  virtual const std::string& layer_name(size_t i) const = 0;
  virtual const std::vector<Param*>& layer_params(size_t i) const = 0;
  virtual int64_t layer_saved_bytes(size_t i, const Microbatch& mb) const = 0;
  // The routed layers this rank holds, with their block names ("h3").
  virtual std::vector<std::pair<std::string, RoutedLayer*>> routed_layers() const = 0;
  virtual void set_hooks(LayerHooks* hooks) = 0;

  // Every layer: the sum of token losses (0 without targets); backward accumulates parameter
  // gradients, and `after_layer(i)` runs once layer i is done.
  virtual double forward(const Microbatch& mb) = 0;
  virtual void backward(const Microbatch& mb, const std::function<void(size_t)>& after_layer) = 0;
  // A pipeline chunk: layers [first, last) on the residual stream the caller holds, with their
  // activations kept in slot k.
  virtual void forward_range(const Microbatch& mb, Tensor& x, size_t first, size_t last) = 0;
  virtual void backward_range(const Microbatch& mb, Tensor& dx, size_t first, size_t last,
                              const std::function<void(size_t)>& after_layer) = 0;
  // A split backward of a pipeline chunk: backward_range with the linear layers' weight-gradient
  // GEMMs set aside, layer first + j's into deferred[j]; weight_range runs them later.
  // `after_layer(i)` runs once layer i's weight gradients are in.
  virtual void backward_input_range(const Microbatch& mb, Tensor& dx, size_t first, size_t last,
                                    std::vector<DeferredWeightGrads>& deferred) = 0;
  virtual void weight_range(std::vector<DeferredWeightGrads>& deferred, size_t first, size_t last,
                            const std::function<void(size_t)>& after_layer) = 0;
  virtual void use_slot(int k, size_t first, size_t last) = 0;
  virtual bool has_head() const = 0;
  virtual double head_loss() const = 0;
  // Activation bytes all layers keep for one micro-batch, plus what recomputing blocks share.
  virtual int64_t activation_bytes(const Microbatch& mb) const = 0;
  // The head's logits of the last forward without targets: [rows, V_padded].
  virtual const Tensor& logits() const = 0;

  // Generation of one sequence with a key/value cache of `capacity` positions (0: back to
  // training); decode() runs the next `n` tokens.
  virtual void use_kv_cache(int64_t capacity) = 0;
  virtual void decode(const int32_t* tokens, int64_t n) = 0;
  virtual int64_t decoded() const = 0;
  virtual int64_t max_rows() const = 0;  // micro-batch x the positions held here
};

// The model `c` describes, over the tensor slots' layer API: the layers numbered in `only` (a
// pipeline stage's), or all of them; parameters declared into `params`.
std::unique_ptr<Model> build(const Config& c, LayerApi& api, ParamStore& params, int64_t max_rows,
                             bool profile = false, const std::vector<int>& only = {});

}  // namespace loom::model
