// The three layer kinds of a GPT: token+position embedding, a pre-LN transformer block, and the
// final norm + LM head + loss. Each declares its parameters with roles and runs its math through
// the parallel layer API, never testing a parallel degree itself.
#pragma once

#include <memory>
#include <string>

#include "gpt/config.hpp"
#include "gpt/layer.hpp"
#include "model/params.hpp"
#include "parallel/layer_api.hpp"

namespace loom::gpt {

// Backward temporaries shared by every block (only one block runs backward at a time).
struct Scratch {
  Tensor dh, dqkv, datt, dfc, dact;
  Scratch(const GptConfig& c, int64_t rows);
};

// A LayerNorm (weight and bias) or RMSNorm (weight only) over rows of C channels, with the output
// and statistics it keeps for backward.
struct Norm {
  Param *w = nullptr, *b = nullptr;
  Tensor out, mean, rstd;
  void forward(const loom_ops* o, const Tensor& x, int64_t rows);
  // dinp = d(norm)/dx of dout; accumulates the weight (and bias) gradients.
  void backward(const loom_ops* o, Tensor& dinp, const Tensor& dout, const Tensor& x,
                int64_t rows) const;
};

class Embedding : public Layer {
 public:
  Embedding(const GptConfig& c, LayerApi& api, ParamStore& ps);
  const std::string& name() const override { return name_; }
  void forward(const Microbatch& mb, Tensor& x) override;
  void backward(const Microbatch& mb, Tensor& dx) override;
  Param& wte() { return *wte_; }

 private:
  std::string name_ = "embedding";
  LayerApi& api_;
  Param *wte_, *wpe_;
};

class Block : public Layer {
 public:
  // `profile`: block 0 records its segment timings in api.profile().
  Block(int index, const GptConfig& c, LayerApi& api, ParamStore& ps, Scratch& scratch,
        int64_t rows, bool profile = false);
  const std::string& name() const override { return name_; }
  void forward(const Microbatch& mb, Tensor& x) override;
  void backward(const Microbatch& mb, Tensor& dx) override;
  int64_t saved_bytes(const Microbatch& mb) const override;

 private:

  std::string name_;
  const GptConfig& c_;
  LayerApi& api_;
  Scratch& s_;
  bool profiled_;
  Norm ln1_, ln2_;
  Param *qkv_w_, *qkv_b_, *proj_w_, *proj_b_, *fc_w_, *fc_b_, *out_w_, *out_b_;
  // Saved for backward: block input, residual after attention, qkv, attention output and its
  // log-sum-exp, MLP pre-activation and activation.
  Tensor x_in_, x_mid_, qkv_, att_, lse_, fc_, act_, tmp_;
};

class Head : public Layer {
 public:
  Head(const GptConfig& c, LayerApi& api, ParamStore& ps, Param* tied_wte, int64_t rows);
  const std::string& name() const override { return name_; }
  void forward(const Microbatch& mb, Tensor& x) override;
  void backward(const Microbatch& mb, Tensor& dx) override;
  int64_t saved_bytes(const Microbatch& mb) const override;
  // Sum of token losses of the last forward, and its logits [rows, V_padded] (inference only:
  // training overwrites them with their gradient).
  double loss_sum() const { return loss_sum_; }
  const Tensor& logits() const { return logits_; }

 private:
  std::string name_ = "head";
  const GptConfig& c_;
  LayerApi& api_;
  Norm norm_;
  Param* head_w_;
  Tensor x_in_, h_full_, logits_, dh_;
  double loss_sum_ = 0;
};

}  // namespace loom::gpt
