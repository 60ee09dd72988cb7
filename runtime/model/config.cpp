#include "model/config.hpp"

#include <cmath>
#include <limits>
#include <sstream>

#include "config/schema.hpp"
#include "config/section.hpp"
#include "core/errors.hpp"

namespace loom::model {

namespace {

std::string num(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// Non-embedding parameters, with each MoE layer counting `experts_counted` of its experts.
int64_t params_counting(const Config& g, int64_t experts_counted) {
  const int64_t C = g.d_model, F = g.d_ff, fc_out = g.fc_out(), bias = g.bias ? 1 : 0;
  const int64_t norm_params = g.norm == "layernorm" ? (1 + bias) * C : C;
  const int64_t attn = C * g.qkv_width() + (g.qkv_bias() ? g.qkv_width() : 0) +
                       C * g.n_head * g.head_dim() + (g.proj_bias() ? C : 0);
  const int64_t mlp_params = fc_out * C + bias * fc_out + C * F + bias * C;
  int64_t total = 0;
  for (int64_t i = 0; i < g.n_layer; ++i)
    total += 2 * norm_params + attn +
             (g.is_moe_block(i) ? C * g.moe.experts + experts_counted * mlp_params : mlp_params);
  const int64_t head = g.tied_embeddings ? 0 : g.vocab_size * C;
  return total + norm_params + head;
}

int64_t embedding_params(const Config& g) {
  return g.vocab_size * g.d_model + (g.learned_positions() ? g.max_positions * g.d_model : 0);
}

// Llama's MLP width: 2/3 of 4 d_model (SwiGLU has three matrices where GELU has two), times
// ffn_dim_multiplier, rounded up to a multiple of multiple_of (Meta's llama model.py).
int64_t llama_ffn_width(int64_t d_model, double multiplier, int64_t multiple_of) {
  int64_t hidden = 2 * (4 * d_model) / 3;
  if (multiplier > 0) hidden = static_cast<int64_t>(multiplier * static_cast<double>(hidden));
  return (hidden + multiple_of - 1) / multiple_of * multiple_of;
}

void check_moe(const Config& g) {
  if (g.moe.experts == 0) return;
  if (g.moe.top_k > g.moe.experts)
    throw ConfigError("[model.moe] top_k = " + std::to_string(g.moe.top_k) +
                      " is more than experts = " + std::to_string(g.moe.experts) +
                      ": a token cannot go to more experts than there are");
  if (!g.moe.dropless && !(g.moe.capacity_factor > 0))
    throw ConfigError("[model.moe] capacity_factor = " + std::to_string(g.moe.capacity_factor) +
                      " must be positive (or set dropless = true)");
  if (g.moe.every > g.n_layer)
    throw ConfigError("[model.moe] every = " + std::to_string(g.moe.every) +
                      " is more than n_layer = " + std::to_string(g.n_layer) +
                      ": no block would be MoE");
}

void check_attention(const Config& g) {
  if (g.d_model % g.n_head != 0)
    throw ConfigError("[model] d_model = " + std::to_string(g.d_model) +
                      " is not divisible by n_head = " + std::to_string(g.n_head));
  if (g.n_head % g.kv_heads() != 0)
    throw ConfigError("[model] n_kv_head = " + std::to_string(g.kv_heads()) +
                      " does not divide n_head = " + std::to_string(g.n_head) +
                      ": each key/value head serves a whole group of query heads");
}

void check_positions(const Config& g) {
  if (g.sliding_window > 0 && g.seq_len > g.sliding_window)
    throw ConfigError("[model] seq_len = " + std::to_string(g.seq_len) +
                      " is more than sliding_window = " + std::to_string(g.sliding_window) +
                      ": Loom attends over whole sequences, so a context longer than "
                      "the window would not be this model's attention");
  if (g.learned_positions() && g.seq_len > g.max_positions)
    throw ConfigError("[model] seq_len = " + std::to_string(g.seq_len) +
                      " is more than max_positions = " + std::to_string(g.max_positions) +
                      ": the learned position table has no row for it");
  if (!g.rope()) return;
  if (!(g.rope_theta > 0))
    throw ConfigError("[model] rope_theta = " + num(g.rope_theta) + " must be positive");
  if (g.head_dim() % 2 != 0)
    throw ConfigError("[model] d_model / n_head = " + std::to_string(g.head_dim()) +
                      " is odd: RoPE rotates channel pairs and needs an even head dimension");
  const auto& s = g.rope_scaling;
  if (s.type == "none") return;
  if (!(s.factor >= 1))
    throw ConfigError("[model.rope_scaling] factor = " + num(s.factor) + " must be at least 1");
  if (!(s.low_freq_factor > 0) || !(s.high_freq_factor > s.low_freq_factor))
    throw ConfigError("[model.rope_scaling] high_freq_factor = " + num(s.high_freq_factor) +
                      " must be more than low_freq_factor = " + num(s.low_freq_factor) + " > 0");
}

}  // namespace

int64_t Config::padded_vocab(int64_t multiple) const {
  return (vocab_size + multiple - 1) / multiple * multiple;
}

// inv_freq_i = theta^(-2i/D). Llama 3.1 scaling, by wavelength w_i = 2 pi / inv_freq_i with
// L = original_max_position: w < L / high_freq_factor keeps inv_freq; w > L / low_freq_factor
// divides it by factor; in between it blends the two with
// s = (L / w - low_freq_factor) / (high_freq_factor - low_freq_factor):
// inv_freq (1 - s) / factor + inv_freq s.
std::vector<double> Config::rope_inv_freq() const {
  const int64_t D = head_dim();
  std::vector<double> f(D / 2);
  for (int64_t i = 0; i < D / 2; ++i) {
    // fp32 as the reference implementations compute it (theta ** (arange(0, D, 2).float() / D)).
    const float expo = static_cast<float>(2 * i) / static_cast<float>(D);
    f[i] = 1.0f / std::pow(static_cast<float>(rope_theta), expo);
  }
  if (rope_scaling.type != "llama3") return f;
  const double L = static_cast<double>(rope_scaling.original_max_position);
  const double lo = rope_scaling.low_freq_factor, hi = rope_scaling.high_freq_factor;
  for (double& inv : f) {
    const double wavelen = 2 * M_PI / inv;
    if (wavelen < L / hi) continue;
    if (wavelen > L / lo) {
      inv /= rope_scaling.factor;
      continue;
    }
    const double s = (L / wavelen - lo) / (hi - lo);
    inv = (1 - s) * inv / rope_scaling.factor + s * inv;
  }
  return f;
}

int64_t Config::non_embedding_params() const { return params_counting(*this, moe.experts); }

int64_t Config::params() const { return non_embedding_params() + embedding_params(*this); }

int64_t Config::active_params() const {
  return params_counting(*this, moe.top_k) + embedding_params(*this);
}

// A MoE layer runs top_k experts per token: the FLOPs follow the active parameters. The
// attention term counts query heads: grouped-query attention shares K and V, not the scores.
double Config::flops_per_token() const {
  return 6.0 * static_cast<double>(params_counting(*this, moe.top_k)) +
         12.0 * n_layer * n_head * head_dim() * seq_len;
}

double Config::executed_flops_per_token() const {
  return flops_per_token() + (tied_embeddings ? 6.0 * vocab_size * d_model : 0.0);
}

std::string Config::describe() const {
  std::ostringstream os;
  os << n_layer << " layers, d_model " << d_model << ", " << n_head << " heads";
  if (grouped_query()) os << " (" << kv_heads() << " kv heads)";
  os << ", " << positions << (positions == "none" ? " positions" : "") << ", " << norm << ", "
     << mlp << ", d_ff " << d_ff << (bias ? "" : ", no bias");
  if (attention_bias != "as_bias" && attention_bias != "none")
    os << ", attention bias " << attention_bias;
  os << (tied_embeddings ? ", tied" : "");
  if (moe.experts > 0) os << ", " << moe.experts << " experts (top " << moe.top_k << ")";
  os << ", T " << seq_len << ", vocab " << vocab_size;
  return os.str();
}

Config read_model(const config::Section& model) {
  Config g;
  g.n_layer = model.i64("n_layer");
  g.n_head = model.i64("n_head");
  g.n_kv_head = model.i64("n_kv_head");
  if (g.n_kv_head == 0) g.n_kv_head = g.n_head;
  g.d_model = model.i64("d_model");
  g.mlp = model.str("mlp");
  g.d_ff = model.i64("d_ff");
  const int64_t multiple_of = model.i64("multiple_of");
  if (g.d_ff == 0)
    g.d_ff = multiple_of > 0
                 ? llama_ffn_width(g.d_model, model.f64("ffn_dim_multiplier"), multiple_of)
                 : 4 * g.d_model;
  g.vocab_size = model.i64("vocab_size");
  g.seq_len = model.i64("seq_len");
  g.positions = model.str("positions");
  g.max_positions = model.i64("max_positions");
  if (g.max_positions == 0) g.max_positions = g.seq_len;
  g.sliding_window = model.i64("sliding_window");
  g.rope_theta = model.f64("rope_theta");
  g.rope_scaling.type = model.str("rope_scaling.type");
  g.rope_scaling.factor = model.f64("rope_scaling.factor");
  g.rope_scaling.low_freq_factor = model.f64("rope_scaling.low_freq_factor");
  g.rope_scaling.high_freq_factor = model.f64("rope_scaling.high_freq_factor");
  g.rope_scaling.original_max_position = model.i64("rope_scaling.original_max_position");
  g.norm = model.str("norm");
  g.norm_eps = model.f64("norm_eps");
  g.bias = model.boolean("bias");
  g.attention_bias = model.str("attention_bias");
  g.tied_embeddings = model.boolean("tied_embeddings");
  g.init_std = static_cast<float>(model.f64("init_std"));
  g.recompute = model.str("recompute");
  g.recompute_layers = model.i64("recompute_layers");
  if (g.recompute_layers > g.n_layer)
    throw ConfigError("[model] recompute_layers = " + std::to_string(g.recompute_layers) +
                      " is more than n_layer = " + std::to_string(g.n_layer));
  g.moe.experts = model.i64("moe.experts");
  g.moe.top_k = model.i64("moe.top_k");
  g.moe.every = model.i64("moe.every");
  g.moe.capacity_factor = model.f64("moe.capacity_factor");
  g.moe.dropless = model.boolean("moe.dropless");
  g.moe.aux_coef = model.f64("moe.aux_coef");
  g.moe.z_coef = model.f64("moe.z_coef");
  check_moe(g);
  check_attention(g);
  check_positions(g);
  return g;
}

std::vector<std::string> architecture_differences(const Config& a, const Config& b) {
  std::vector<std::string> out;
  auto cmp = [&](const char* key, const auto& x, const auto& y) {
    if (x == y) return;
    std::ostringstream os;
    os << std::boolalpha << key << " = " << x << " there, " << y << " here";
    out.push_back(os.str());
  };
  cmp("n_layer", a.n_layer, b.n_layer);
  cmp("n_head", a.n_head, b.n_head);
  cmp("n_kv_head", a.kv_heads(), b.kv_heads());
  cmp("d_model", a.d_model, b.d_model);
  cmp("d_ff", a.d_ff, b.d_ff);
  cmp("vocab_size", a.vocab_size, b.vocab_size);
  cmp("positions", a.positions, b.positions);
  if (a.learned_positions() && b.learned_positions())
    cmp("max_positions", a.max_positions, b.max_positions);
  if (a.rope() && b.rope()) cmp("rope_theta", a.rope_theta, b.rope_theta);
  cmp("norm", a.norm, b.norm);
  cmp("norm_eps", a.norm_eps, b.norm_eps);
  cmp("mlp", a.mlp, b.mlp);
  cmp("bias", a.bias, b.bias);
  cmp("attention q/k/v bias", a.qkv_bias(), b.qkv_bias());
  cmp("attention output bias", a.proj_bias(), b.proj_bias());
  cmp("tied_embeddings", a.tied_embeddings, b.tied_embeddings);
  cmp("moe.experts", a.moe.experts, b.moe.experts);
  if (a.moe.experts > 0 && b.moe.experts > 0) {
    cmp("moe.top_k", a.moe.top_k, b.moe.top_k);
    cmp("moe.every", a.moe.every, b.moe.every);
  }
  return out;
}

namespace {

using config::kInf;
using config::ValueType;

// [model]'s keys: the shape (sizes and context) ...
std::vector<config::KeySpec> shape_keys() {
  return {
      {"preset", ValueType::String, "\"\"",
       "fill unset keys from a preset (loom model info PRESET)", -kInf, kInf,
       config::model_preset_names()},
      {"n_layer", ValueType::Int, "4", "transformer blocks", 1, 1024},
      {"n_head", ValueType::Int, "4", "attention (query) heads", 1, 1024},
      {"n_kv_head", ValueType::Int, "0",
       "key/value heads: 1 = multi-query, n_head = multi-head; 0 = n_head", 0, 1024},
      {"d_model", ValueType::Int, "128", "residual stream width", 1, 65536},
      {"d_ff", ValueType::Int, "0",
       "MLP hidden width; 0 = 4 * d_model, or Llama's rounding when multiple_of > 0", 0, 1 << 20},
      {"ffn_dim_multiplier", ValueType::Float, "0.0",
       "Llama: d_ff = multiplier x 2/3 x 4 d_model (0 = 1) ...", 0, 64},
      {"multiple_of", ValueType::Int, "0",
       "... rounded up to a multiple of this (with d_ff = 0); 0 = off", 0, 1 << 20},
      {"vocab_size", ValueType::Int, "256", "vocabulary (256 = bytes)", 2, 1 << 24},
      {"seq_len", ValueType::Int, "128", "context length T", 1, 1 << 20},
  };
}

// ... the architecture (positions, norms, biases, MLP, attention window) ...
std::vector<config::KeySpec> architecture_keys() {
  return {
      {"positions",
       ValueType::String,
       "\"learned\"",
       "learned (a table of max_positions rows) | rope | none",
       -kInf,
       kInf,
       {"learned", "rope", "none"}},
      {"max_positions", ValueType::Int, "0",
       "the longest context: rows of the learned position table; with rope, the context an "
       "import stated, which "
       "an export keeps (max_position_embeddings); 0 = seq_len",
       0, 1 << 20},
      {"sliding_window", ValueType::Int, "0",
       "the attention window of a model trained with one (Mistral); seq_len may not exceed it; "
       "0 = none",
       0, 1 << 20},
      {"rope_theta", ValueType::Float, "10000.0",
       "RoPE base: 10000 (GPT-NeoX, Llama 2), 500000 (Llama 3)", -kInf, kInf},
      {"norm",
       ValueType::String,
       "\"layernorm\"",
       "layernorm | rmsnorm",
       -kInf,
       kInf,
       {"layernorm", "rmsnorm"}},
      {"norm_eps", ValueType::Float, "1e-5", "epsilon of every norm", 0, 1},
      {"bias", ValueType::Bool, "true",
       "biases in every linear layer and LayerNorm (false: Llama)"},
      {"attention_bias",
       ValueType::String,
       "\"as_bias\"",
       "attention biases alone: as_bias (follow bias) | none | qkv (Qwen2) | all (Llama "
       "attention_bias: q, k, v, o)",
       -kInf,
       kInf,
       {"as_bias", "none", "qkv", "all"}},
      {"mlp",
       ValueType::String,
       "\"gelu\"",
       "gelu (tanh form) | gelu_exact (erf form) | swiglu",
       -kInf,
       kInf,
       {"gelu", "gelu_exact", "swiglu"}},
  };
}

// ... and how it is initialised and what backward recomputes.
std::vector<config::KeySpec> training_keys() {
  return {
      {"tied_embeddings", ValueType::Bool, "true", "share the token embedding with the LM head"},
      {"init_std", ValueType::Float, "0.02", "std of weight init (residual projections / sqrt(2L))",
       0, 10},
      {"recompute",
       ValueType::String,
       "\"none\"",
       "activation recomputation: none | selective (norms and MLP activation, no GEMM) | full "
       "(the whole block)",
       -kInf,
       kInf,
       {"none", "selective", "full"}},
      {"recompute_layers", ValueType::Int, "0",
       "recompute the first N blocks of each pipeline chunk; 0 = all", 0, 1024},
      {"init_from", ValueType::String, "\"\"",
       "start from these weights: a Loom checkpoint (any layout), a Hugging Face "
       "folder or an llm.c model file; the optimizer starts fresh"},
  };
}

}  // namespace

// [model], [model.moe] and [model.rope_scaling]: declared here, beside read_model that reads them.
std::vector<config::SectionSpec> model_sections() {
  config::SectionSpec model{
      "model", "the network: a decoder-only transformer, GPT-2 to Llama 3 (docs/models.md)", {}};
  for (auto keys : {shape_keys, architecture_keys, training_keys})
    for (config::KeySpec& k : keys()) model.keys.push_back(std::move(k));
  config::SectionSpec moe{
      "model.moe",
      "mixture of experts: every `every`-th block's MLP routed to `experts` MLPs",
      {
          {"experts", ValueType::Int, "0", "experts per MoE layer; 0 = a dense model", 0, 4096},
          {"top_k", ValueType::Int, "2", "experts each token goes to", 1, 64},
          {"every", ValueType::Int, "2", "every this many blocks (the last of each group) is MoE",
           1, 1024},
          {"capacity_factor", ValueType::Float, "1.25",
           "per-expert slots in each sequence = ceil(factor x seq_len x top_k / experts)", -kInf,
           kInf},
          {"dropless", ValueType::Bool, "false", "no capacity: every routed token is computed"},
          {"aux_coef", ValueType::Float, "0.01",
           "load-balancing loss coefficient (Switch/GShard form)", 0, kInf},
          {"z_coef", ValueType::Float, "0.0", "router z-loss coefficient", 0, kInf},
      }};
  config::SectionSpec rope_scaling{
      "model.rope_scaling",
      "RoPE frequency scaling for long context (Llama 3.1)",
      {
          {"type", ValueType::String, "\"none\"", "none | llama3", -kInf, kInf, {"none", "llama3"}},
          {"factor", ValueType::Float, "8.0", "low frequencies are divided by this", -kInf, kInf},
          {"low_freq_factor", ValueType::Float, "1.0",
           "wavelengths above original_max_position / this are scaled", -kInf, kInf},
          {"high_freq_factor", ValueType::Float, "4.0",
           "wavelengths below original_max_position / this are kept", -kInf, kInf},
          {"original_max_position", ValueType::Int, "8192",
           "the context the model was pre-trained at", 1, 1 << 24},
      }};
  model.presets = config::model_presets();
  return {model, moe, rope_scaling};
}

std::string init_from(const config::Section& model) { return model.str("init_from"); }

}  // namespace loom::model
