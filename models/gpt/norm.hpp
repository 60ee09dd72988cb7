// A block's and the head's normalisation: LayerNorm or RMSNorm over rows, and what it keeps from
// forward for backward.
#pragma once

#include <cstdint>

#include "model/params.hpp"
#include "tensor/ops_v2.h"
#include "tensor/tensor.hpp"

namespace loom::gpt {

// What a norm keeps from forward for backward: its output and row statistics.
struct NormActs {
  Tensor out, mean, rstd;
  NormActs() = default;
  NormActs(int64_t rows, int64_t C);
};

// A LayerNorm (weight, and bias unless [model] bias = false) or RMSNorm (weight only) over rows
// of C channels.
struct Norm {
  Param *w = nullptr, *b = nullptr;
  bool rms = false;
  float eps = 1e-5f;
  void forward(const loom_ops_v2* o, NormActs& a, const Tensor& x, int64_t rows) const;
  // dinp = d(norm)/dx of dout; accumulates the weight (and bias) gradients.
  void backward(const loom_ops_v2* o, const NormActs& a, Tensor& dinp, const Tensor& dout,
                const Tensor& x, int64_t rows) const;
};

}  // namespace loom::gpt
