// The unit a pipeline stage runs: a layer transforms the residual stream in place, forward and
// backward. Embedding fills it, blocks update it, the head turns it into a loss.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/model.hpp"
#include "model/params.hpp"
#include "tensor/tensor.hpp"

namespace loom::gpt {

// The micro-batch and the layer hooks are the runtime's (model/model.hpp).
using Microbatch = model::Microbatch;
using LayerHooks = model::LayerHooks;

class Layer {
 public:
  virtual ~Layer() = default;
  virtual const std::string& name() const = 0;
  // x: the residual stream [B*T, C], read and written in place.
  virtual void forward(const Microbatch& mb, Tensor& x) = 0;
  // dx: the gradient of the residual stream, read and written in place.
  virtual void backward(const Microbatch& mb, Tensor& dx) = 0;
  // Bytes of activations this layer keeps from forward for backward, for a micro-batch.
  virtual int64_t saved_bytes(const Microbatch&) const { return 0; }
  // Selects activation slot k (allocated on first use) for the forward and backward that follow:
  // a pipeline schedule keeps several micro-batches in flight, each in its own slot.
  virtual void use_slot(int /*k*/) {}
  // The parameters this layer reads (a tied embedding appears in both layers that use it); their
  // gradients are complete once every layer listing them has run backward.
  const std::vector<Param*>& params() const { return params_; }

 protected:
  std::vector<Param*> params_;
};

}  // namespace loom::gpt
