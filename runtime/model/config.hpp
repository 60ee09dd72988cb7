// The model's shape and options, read from the [model] section (presets fill what the file leaves
// out): what the planner, checkpoints and import/export read of a model without building it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace loom::config {
class Section;
struct SectionSpec;
}  // namespace loom::config

namespace loom::model {

struct Config {
  int64_t n_layer = 2, n_head = 2, d_model = 64, d_ff = 256;
  int64_t n_kv_head = 0;  // 0 until read_model resolves it (= n_head)
  int64_t vocab_size = 256, seq_len = 64;
  std::string positions = "learned";  // learned | rope | none
  int64_t max_positions =
      0;  // rows of the learned table (>= seq_len); with rope, the context an import stated
  // A window the model was trained with (Mistral): within it, whole-sequence attention is the
  // same, so seq_len may not exceed it. 0 = none.
  int64_t sliding_window = 0;
  double rope_theta = 10000.0;
  // Llama 3.1's RoPE frequency scaling ([model.rope_scaling]); type "none" = off.
  struct RopeScaling {
    std::string type = "none";
    double factor = 8.0, low_freq_factor = 1.0, high_freq_factor = 4.0;
    int64_t original_max_position = 8192;
  } rope_scaling;
  std::string norm = "layernorm";  // layernorm | rmsnorm
  double norm_eps = 1e-5;
  bool bias = true;  // linear layers and LayerNorm
  // Biases of attention alone: as_bias (follow `bias`) | none | qkv (Qwen2: q, k and v) | all
  // (Llama's attention_bias: q, k, v and the output projection).
  std::string attention_bias = "as_bias";
  std::string mlp = "gelu";  // gelu (tanh form) | gelu_exact (erf form) | swiglu
  bool tied_embeddings = true;
  float init_std = 0.02f;
  // Activation recomputation ([model] recompute): what a block keeps from forward for backward.
  //   none: everything; selective: the GEMM outputs and the attention core (q, k, v, output,
  //   log-sum-exp), recomputing the norms' outputs and the MLP activation (no GEMM reruns);
  //   full: only the block's input, rerunning its whole forward in backward.
  std::string recompute = "none";
  int64_t recompute_layers = 0;  // the first N blocks of each pipeline chunk; 0 = all
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
  int64_t kv_heads() const { return n_kv_head > 0 ? n_kv_head : n_head; }
  // Grouped-query (or multi-query) attention: the block keeps q and kv as two weights.
  bool grouped_query() const { return kv_heads() != n_head; }
  bool rope() const { return positions == "rope"; }
  bool learned_positions() const { return positions == "learned"; }
  // The longest context the model states: what an export writes as max_position_embeddings.
  int64_t context() const { return std::max(max_positions, seq_len); }
  bool qkv_bias() const { return attention_bias == "as_bias" ? bias : attention_bias != "none"; }
  bool proj_bias() const { return attention_bias == "as_bias" ? bias : attention_bias == "all"; }
  // Width of the first MLP matmul: SwiGLU stacks gate and up.
  int64_t fc_out() const { return mlp == "swiglu" ? 2 * d_ff : d_ff; }
  // Width of one row of q, k and v together: (H + 2 Hkv) head_dim.
  int64_t qkv_width() const { return (n_head + 2 * kv_heads()) * head_dim(); }
  // The vocabulary rounded up to a multiple of `multiple` (GEMM-friendly, and divisible by the
  // tensor-parallel degree); the padding rows never contribute to the loss.
  int64_t padded_vocab(int64_t multiple) const;
  // RoPE's head_dim / 2 inverse frequencies theta^(-2i/D), with the scaling applied.
  std::vector<double> rope_inv_freq() const;
  // Every parameter, on the real (unpadded) vocabulary.
  int64_t params() const;
  // Parameters outside the token and position embeddings (PaLM's N in 6N + 12LHQT); an untied
  // LM head counts.
  int64_t non_embedding_params() const;
  // Training FLOPs per token (PaLM appendix B): 6 N + 12 L H Q T, N = non_embedding_params()
  // with each MoE layer counting its top_k experts (the parameters a token actually uses).
  double flops_per_token() const;
  // The same plus the LM-head GEMM (6 V C), which the PaLM count leaves out when the head is
  // tied to the embedding: the work the hardware actually does, used by bench/train_step.
  double executed_flops_per_token() const;
  // "4 layers, d_model 64, 4 heads (2 kv heads), rope, rmsnorm, swiglu, no bias, T 64, vocab 256"
  std::string describe() const;
  // Parameters a token uses (MoE: top_k of each layer's experts), embeddings included.
  int64_t active_params() const;
};

// Reads and checks [model]; throws ConfigError naming the offending key.
Config read_model(const config::Section& model);
// [model] init_from: where the weights start ("" = initialised from the seed).
std::string init_from(const config::Section& model);
// The sections read_model reads, declared beside it: [model], [model.moe], [model.rope_scaling].
std::vector<config::SectionSpec> model_sections();

// The architecture keys on which two models differ, as "n_head = 4 there, 2 here" (a: there, b:
// here). Training keys (seq_len, recompute, init_from) are not architecture.
std::vector<std::string> architecture_differences(const Config& there, const Config& here);

}  // namespace loom::model
