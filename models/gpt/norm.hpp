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
  Tensor ones;  // C ones on the device (the blocks share one), for a LayerNorm whose input is kept
                // centred (keep_input)
  void forward(const loom_ops_v2* o, NormActs& a, const Tensor& x, int64_t rows) const;
  // kept = the input x that forward just normalised, for backward. `rounds` (a bf16 run): kept
  // holds bf16 values, in 16 bits where it is bf16, rounded in fp32 storage elsewhere; a
  // LayerNorm's are x - mean, the row's mean then 0 in `a`, so that rounding keeps the part of
  // x the normalisation keeps (a row's mean can be 58 times its spread, and x's own bf16 values
  // would lose a 58th of its centred part). `work`: rows x C of fp32 scratch.
  void keep_input(const loom_ops_v2* o, NormActs& a, const Tensor& x, Tensor& kept,
                  const Tensor& work, int64_t rows, bool rounds) const;
  // dinp = d(norm)/dx of dout; accumulates the weight (and bias) gradients.
  void backward(const loom_ops_v2* o, const NormActs& a, Tensor& dinp, const Tensor& dout,
                const Tensor& x, int64_t rows) const;
};

}  // namespace loom::gpt
