#include "gpt/config.hpp"

#include "config/config.hpp"
#include "core/errors.hpp"

namespace loom::gpt {

int64_t GptConfig::padded_vocab(int64_t multiple) const {
  return (vocab_size + multiple - 1) / multiple * multiple;
}

int64_t GptConfig::non_embedding_params() const {
  int64_t C = d_model, F = d_ff;
  int64_t norm_params = norm == "layernorm" ? 2 * C : C;
  int64_t fc_out = mlp == "swiglu" ? 2 * F : F;
  int64_t attn = 3 * C * C + 3 * C + C * C + C;
  int64_t mlp_params = fc_out * C + fc_out + C * F + C;
  int64_t per_layer = 2 * norm_params + attn + mlp_params;
  int64_t head = tied_embeddings ? 0 : vocab_size * C;
  return n_layer * per_layer + norm_params + head;
}

double GptConfig::flops_per_token() const {
  return 6.0 * static_cast<double>(non_embedding_params()) +
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
  if (g.d_model % g.n_head != 0)
    throw ConfigError("[model] d_model = " + std::to_string(g.d_model) +
                      " is not divisible by n_head = " + std::to_string(g.n_head));
  return g;
}

}  // namespace loom::gpt
