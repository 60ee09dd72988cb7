// GPT hyper-parameters, read from the [model] section (presets fill what the file leaves out).
#pragma once

#include <cstdint>
#include <string>

namespace loom::config {
class Config;
}

namespace loom::gpt {

struct GptConfig {
  int64_t n_layer = 2, n_head = 2, d_model = 64, d_ff = 256;
  int64_t vocab_size = 256, seq_len = 64;
  std::string norm = "layernorm";  // layernorm | rmsnorm
  std::string mlp = "gelu";        // gelu | swiglu
  bool tied_embeddings = true;
  float init_std = 0.02f;
  // Mixture of experts ([model.moe]); experts = 0: dense.
  struct Moe {
    int64_t experts = 0, top_k = 2, every = 2;
    double capacity_factor = 1.25;
    bool dropless = false;
    double aux_coef = 0.01, z_coef = 0.0;
  } moe;
  // Block i (from 0) is a MoE block: the last of each group of `every`.
  bool is_moe_block(int64_t i) const { return moe.experts > 0 && (i + 1) % moe.every == 0; }

  int64_t head_dim() const { return d_model / n_head; }
  // The vocabulary rounded up to a multiple of `multiple` (GEMM-friendly, and divisible by the
  // tensor-parallel degree); the padding rows never contribute to the loss.
  int64_t padded_vocab(int64_t multiple) const;
  // Parameters outside the token and position embeddings (PaLM's N in 6N + 12LHQT).
  int64_t non_embedding_params() const;
  // Training FLOPs per token (PaLM appendix B): 6 N + 12 L H Q T, N = non_embedding_params()
  // with each MoE layer counting its top_k experts (the parameters a token actually uses).
  double flops_per_token() const;
  // The same plus the LM-head GEMM (6 V C), which the PaLM count leaves out when the head is
  // tied to the embedding: the work the hardware actually does, used by bench/train_step.
  double executed_flops_per_token() const;
};

// Reads and checks [model]; throws ConfigError naming the offending key.
GptConfig from_config(const config::Config& cfg);

}  // namespace loom::gpt
