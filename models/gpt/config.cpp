#include "gpt/config.hpp"

#include "config/config.hpp"
#include "core/errors.hpp"

namespace loom::gpt {

int64_t GptConfig::padded_vocab(int64_t multiple) const {
  return (vocab_size + multiple - 1) / multiple * multiple;
}

// Non-embedding parameters, with each MoE layer counting `experts_counted` of its experts.
static int64_t params_counting(const GptConfig& g, int64_t experts_counted) {
  int64_t C = g.d_model, F = g.d_ff;
  int64_t norm_params = g.norm == "layernorm" ? 2 * C : C;
  int64_t fc_out = g.mlp == "swiglu" ? 2 * F : F;
  int64_t attn = 3 * C * C + 3 * C + C * C + C;
  int64_t mlp_params = fc_out * C + fc_out + C * F + C;
  int64_t total = 0;
  for (int64_t i = 0; i < g.n_layer; ++i)
    total += 2 * norm_params + attn + (g.is_moe_block(i) ? C * g.moe.experts + experts_counted * mlp_params : mlp_params);
  int64_t head = g.tied_embeddings ? 0 : g.vocab_size * C;
  return total + norm_params + head;
}

int64_t GptConfig::non_embedding_params() const { return params_counting(*this, moe.experts); }

// A MoE layer runs top_k experts per token: the FLOPs follow the active parameters.
double GptConfig::flops_per_token() const {
  return 6.0 * static_cast<double>(params_counting(*this, moe.top_k)) +
         12.0 * n_layer * n_head * head_dim() * seq_len;
}

double GptConfig::executed_flops_per_token() const {
  return flops_per_token() + (tied_embeddings ? 6.0 * vocab_size * d_model : 0.0);
}

GptConfig from_config(const config::Config& cfg) {
  GptConfig g;
  g.n_layer = cfg.i64("model.n_layer");
  g.n_head = cfg.i64("model.n_head");
  g.d_model = cfg.i64("model.d_model");
  g.d_ff = cfg.i64("model.d_ff");
  if (g.d_ff == 0) g.d_ff = 4 * g.d_model;
  g.vocab_size = cfg.i64("model.vocab_size");
  g.seq_len = cfg.i64("model.seq_len");
  g.norm = cfg.str("model.norm");
  g.mlp = cfg.str("model.mlp");
  g.tied_embeddings = cfg.boolean("model.tied_embeddings");
  g.init_std = static_cast<float>(cfg.f64("model.init_std"));
  g.moe.experts = cfg.i64("model.moe.experts");
  g.moe.top_k = cfg.i64("model.moe.top_k");
  g.moe.every = cfg.i64("model.moe.every");
  g.moe.capacity_factor = cfg.f64("model.moe.capacity_factor");
  g.moe.dropless = cfg.boolean("model.moe.dropless");
  g.moe.aux_coef = cfg.f64("model.moe.aux_coef");
  g.moe.z_coef = cfg.f64("model.moe.z_coef");
  if (g.moe.experts > 0) {
    if (g.moe.top_k > g.moe.experts)
      throw ConfigError("[model.moe] top_k = " + std::to_string(g.moe.top_k) + " is more than experts = " +
                        std::to_string(g.moe.experts) + ": a token cannot go to more experts than there are");
    if (!g.moe.dropless && !(g.moe.capacity_factor > 0))
      throw ConfigError("[model.moe] capacity_factor = " + std::to_string(g.moe.capacity_factor) +
                        " must be positive (or set dropless = true)");
    if (g.moe.every > g.n_layer)
      throw ConfigError("[model.moe] every = " + std::to_string(g.moe.every) + " is more than n_layer = " +
                        std::to_string(g.n_layer) + ": no block would be MoE");
  }
  if (g.d_model % g.n_head != 0)
    throw ConfigError("[model] d_model = " + std::to_string(g.d_model) +
                      " is not divisible by n_head = " + std::to_string(g.n_head));
  return g;
}

}  // namespace loom::gpt
