// The [model] presets: published architectures and small CPU-sized ones. A preset fills the keys
// a file leaves out; dotted keys fill a subsection ("moe.experts" -> [model.moe] experts).
// Sources of each shape are listed in docs/models.md.
#include "config/schema.hpp"

namespace loom::config {

namespace {

using Values = std::vector<std::pair<std::string, std::string>>;

// GPT-2 (Radford et al. 2019; the Hugging Face gpt2* configs): learned positions, LayerNorm,
// GELU (tanh), biases, tied head, vocabulary 50257, context 1024.
Values gpt2(const char* layers, const char* heads, const char* width) {
  return {{"n_layer", layers},       {"n_head", heads},
          {"d_model", width},        {"d_ff", "0"},
          {"vocab_size", "50257"},   {"seq_len", "1024"},
          {"max_positions", "1024"}, {"positions", "\"learned\""},
          {"norm", "\"layernorm\""}, {"mlp", "\"gelu\""},
          {"bias", "true"},          {"tied_embeddings", "true"}};
}

// Llama 3 / 3.1 / 3.2 (Meta's model cards and params.json): RMSNorm eps 1e-5, SwiGLU with
// d_ff from ffn_dim_multiplier and multiple_of, RoPE theta 500000 with the 3.1 frequency scaling,
// no biases, 8 KV heads, vocabulary 128256.
Values llama3(const char* layers, const char* heads, const char* width, const char* ffn_mult,
              const char* multiple_of, const char* tied, const char* scale_factor) {
  return {{"n_layer", layers},
          {"n_head", heads},
          {"n_kv_head", "8"},
          {"d_model", width},
          {"d_ff", "0"},
          {"ffn_dim_multiplier", ffn_mult},
          {"multiple_of", multiple_of},
          {"vocab_size", "128256"},
          {"seq_len", "8192"},
          {"positions", "\"rope\""},
          {"rope_theta", "500000.0"},
          {"norm", "\"rmsnorm\""},
          {"norm_eps", "1e-5"},
          {"mlp", "\"swiglu\""},
          {"bias", "false"},
          {"tied_embeddings", tied},
          {"rope_scaling.type", "\"llama3\""},
          {"rope_scaling.factor", scale_factor},
          {"rope_scaling.low_freq_factor", "1.0"},
          {"rope_scaling.high_freq_factor", "4.0"},
          {"rope_scaling.original_max_position", "8192"}};
}

}  // namespace

const std::vector<std::pair<std::string, Values>>& model_presets() {
  static const std::vector<std::pair<std::string, Values>> presets = [] {
    std::vector<std::pair<std::string, Values>> p;
    // CPU-sized models for tests and demos; bytes as tokens.
    Values gpt2_tiny = {{"n_layer", "2"}, {"n_head", "2"},       {"d_model", "64"},
                        {"d_ff", "256"},  {"vocab_size", "256"}, {"seq_len", "64"}};
    p.push_back({"gpt2-tiny", gpt2_tiny});
    p.push_back({"tiny", gpt2_tiny});  // the name before Llama presets existed
    p.push_back({"llama-tiny",
                 {{"n_layer", "4"},
                  {"n_head", "4"},
                  {"n_kv_head", "2"},
                  {"d_model", "64"},
                  {"d_ff", "0"},
                  {"multiple_of", "32"},
                  {"vocab_size", "256"},
                  {"seq_len", "64"},
                  {"positions", "\"rope\""},
                  {"rope_theta", "10000.0"},
                  {"norm", "\"rmsnorm\""},
                  {"mlp", "\"swiglu\""},
                  {"bias", "false"},
                  {"tied_embeddings", "false"}}});
    p.push_back({"gpt2", gpt2("12", "12", "768")});
    p.push_back({"small", gpt2("12", "12", "768")});  // GPT-2 124M, the earlier name
    p.push_back({"gpt2-medium", gpt2("24", "16", "1024")});
    p.push_back({"gpt2-large", gpt2("36", "20", "1280")});
    p.push_back({"gpt2-xl", gpt2("48", "25", "1600")});
    // Llama 3.2 1B and 3B tie their embeddings; 3.1 8B, 70B and 405B do not.
    p.push_back({"llama3-1b", llama3("16", "32", "2048", "1.5", "256", "true", "32.0")});
    p.push_back({"llama3-3b", llama3("28", "24", "3072", "1.0", "256", "true", "32.0")});
    p.push_back({"llama3-8b", llama3("32", "32", "4096", "1.3", "1024", "false", "8.0")});
    p.push_back({"llama3-70b", llama3("80", "64", "8192", "1.3", "4096", "false", "8.0")});
    p.push_back({"llama3-405b", llama3("126", "128", "16384", "1.2", "4096", "false", "8.0")});
    // Mixtral 8x7B (Jiang et al. 2024; its params.json): every block's MLP is 8 SwiGLU experts,
    // top 2, routed without capacity; RoPE theta 1e6, no scaling, vocabulary 32000.
    p.push_back({"mixtral-8x7b",
                 {{"n_layer", "32"},
                  {"n_head", "32"},
                  {"n_kv_head", "8"},
                  {"d_model", "4096"},
                  {"d_ff", "14336"},
                  {"vocab_size", "32000"},
                  {"seq_len", "4096"},
                  {"positions", "\"rope\""},
                  {"rope_theta", "1000000.0"},
                  {"norm", "\"rmsnorm\""},
                  {"norm_eps", "1e-5"},
                  {"mlp", "\"swiglu\""},
                  {"bias", "false"},
                  {"tied_embeddings", "false"},
                  {"moe.experts", "8"},
                  {"moe.top_k", "2"},
                  {"moe.every", "1"},
                  {"moe.dropless", "true"},
                  {"moe.aux_coef", "0.02"}}});
    return p;
  }();
  return presets;
}

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names{""};
  for (const auto& [name, values] : model_presets()) names.push_back(name);
  return names;
}

}  // namespace loom::config
