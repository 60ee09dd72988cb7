// Hugging Face model folders into Loom's names and layouts: GPT-2 (GPT2LMHeadModel) and the
// Llama family (Llama, Mistral, Qwen2), single or sharded safetensors in fp32, fp16 or bf16.
// Whatever the folder holds that the Loom model cannot (a tensor it would drop, a feature it
// lacks) is refused before anything is written.
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "ckpt/convert_util.hpp"
#include "ckpt/safetensors.hpp"
#include "core/files.hpp"
#include "core/json_read.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace loom::ckpt::convert {

namespace {

// A safetensors tensor by its Hugging Face name, checked against the shape config.json implies.
struct HfTensors {
  std::map<std::string, StEntry> entries;
  fs::path where;
  mutable std::set<std::string> used;  // what the import read: the rest would be dropped
  std::vector<float> get(const std::string& name, const std::vector<int64_t>& shape) const {
    used.insert(name);
    auto it = entries.find(name);
    if (it == entries.end())
      throw RuntimeError(where.string() + ": tensor " + name + " is missing");
    if (it->second.shape != shape) {
      auto str = [](const std::vector<int64_t>& s) {
        std::string o;
        for (int64_t d : s) o += (o.empty() ? "" : "x") + std::to_string(d);
        return o;
      };
      throw RuntimeError(where.string() + ": tensor " + name + " has shape " +
                         str(it->second.shape) + ", config.json implies " + str(shape));
    }
    return read_tensor(name, it->second);
  }
  bool has(const std::string& name) const { return entries.count(name) > 0; }

  // A tensor of the file that the import would drop (a bias the config.json does not announce, a
  // layer beyond n_layer) changes the model: refused, naming them. Buffers transformers saves but
  // recomputes (rotary inv_freq, GPT-2's causal masks) and a tied head's copy are not weights.
  void check_all_used(const std::string& model, bool tied_head) const {
    std::vector<std::string> left;
    for (const auto& [name, e] : entries) {
      const bool buffer = name.ends_with("rotary_emb.inv_freq") || name.ends_with("attn.bias") ||
                          name.ends_with("attn.masked_bias") ||
                          (tied_head && name == "lm_head.weight");
      if (!used.count(name) && !buffer) left.push_back(name);
    }
    if (left.empty()) return;
    std::string names;
    for (size_t i = 0; i < left.size() && i < 4; ++i) names += (i ? ", " : "") + left[i];
    if (left.size() > 4) names += " and " + std::to_string(left.size() - 4) + " more";
    throw RuntimeError(where.string() + ": " + std::to_string(left.size()) +
                       " of its tensors have no place in the " + model +
                       " Loom builds from config.json (" + names +
                       "); importing without them would change the model, so "
                       "nothing is written");
  }
};

// An optional config.json field of the type it must have, or the file and key named.

template <class T>
T field(const json& c, const std::string& k, T def, const fs::path& file) {
  if (!c.contains(k) || c[k].is_null()) return def;
  try {
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)
      return json_integer<T>(c[k], file.string() + ": \"" + k + "\"");
    else
      return c[k].get<T>();
  } catch (const json::exception&) {
    throw RuntimeError(file.string() + ": \"" + k + "\" has the wrong type: " + c[k].dump());
  }
}

int64_t key_i64(const json& c, const std::string& k, const fs::path& file) {
  if (!c.contains(k) || !c[k].is_number())
    throw RuntimeError(file.string() + ": config.json has no integer \"" + k + "\"");
  return positive(json_integer<int64_t>(c[k], file.string() + ": \"" + k + "\""), k,
                  file.string() + ": config.json's");
}

ExternalModel read_hf_gpt2(const json& c, const HfTensors& t, const fs::path& cfg) {
  const std::string act = field<std::string>(c, "activation_function", "gelu_new", cfg);
  if (act != "gelu_new" && act != "gelu_pytorch_tanh" && act != "gelu")
    throw RuntimeError(cfg.string() + ": \"activation_function\": \"" + act +
                       "\" is not supported (gelu_new and "
                       "gelu_pytorch_tanh: the tanh form; gelu: the exact one)");
  // Attention variants GPT2LMHeadModel offers that Loom's attention does not compute.
  if (!field(c, "scale_attn_weights", true, cfg) ||
      field(c, "scale_attn_by_inverse_layer_idx", false, cfg) ||
      field(c, "reorder_and_upcast_attn", false, cfg))
    throw RuntimeError(
        cfg.string() +
        ": scale_attn_weights = false, scale_attn_by_inverse_layer_idx or "
        "reorder_and_upcast_attn is set: Loom scales attention scores by 1/sqrt(head_dim) only");
  const int64_t L = key_i64(c, "n_layer", cfg), H = key_i64(c, "n_head", cfg),
                C = key_i64(c, "n_embd", cfg);
  const int64_t V = key_i64(c, "vocab_size", cfg), P = key_i64(c, "n_positions", cfg);
  const int64_t F = c.contains("n_inner") && c["n_inner"].is_number()
                        ? json_integer<int64_t>(c["n_inner"], cfg.string() + ": \"n_inner\"")
                        : 4 * C;
  const int64_t Vp = (V + 63) / 64 * 64;
  const std::string p = t.has("transformer.wte.weight") ? "transformer." : "";
  Builder b;
  b.m.source = "Hugging Face GPT-2";
  b.m.model_toml =
      toml_line("n_layer", std::to_string(L)) + toml_line("n_head", std::to_string(H)) +
      toml_line("d_model", std::to_string(C)) + toml_line("d_ff", std::to_string(F)) +
      toml_line("vocab_size", std::to_string(V)) + toml_line("seq_len", std::to_string(P)) +
      toml_line("max_positions", std::to_string(P)) + toml_line("positions", "\"learned\"") +
      toml_line("norm", "\"layernorm\"") +
      toml_line("norm_eps", num(field(c, "layer_norm_epsilon", 1e-5, cfg))) +
      toml_line("mlp", act == "gelu" ? "\"gelu_exact\"" : "\"gelu\"") + toml_line("bias", "true") +
      toml_line("tied_embeddings", "true");
  b.put("wte", {Vp, C}, pad_rows(t.get(p + "wte.weight", {V, C}), C, Vp));
  b.put("wpe", {P, C}, t.get(p + "wpe.weight", {P, C}));
  for (int64_t i = 0; i < L; ++i) {
    const std::string h = p + "h." + std::to_string(i) + ".", o = "h" + std::to_string(i) + ".";
    b.put(o + "ln1.w", {C}, t.get(h + "ln_1.weight", {C}));
    b.put(o + "ln1.b", {C}, t.get(h + "ln_1.bias", {C}));
    b.put(o + "attn.qkv.w", {3 * C, C},
          transpose(t.get(h + "attn.c_attn.weight", {C, 3 * C}), C, 3 * C));
    b.put(o + "attn.qkv.b", {3 * C}, t.get(h + "attn.c_attn.bias", {3 * C}));
    b.put(o + "attn.proj.w", {C, C}, transpose(t.get(h + "attn.c_proj.weight", {C, C}), C, C));
    b.put(o + "attn.proj.b", {C}, t.get(h + "attn.c_proj.bias", {C}));
    b.put(o + "ln2.w", {C}, t.get(h + "ln_2.weight", {C}));
    b.put(o + "ln2.b", {C}, t.get(h + "ln_2.bias", {C}));
    b.put(o + "mlp.fc.w", {F, C}, transpose(t.get(h + "mlp.c_fc.weight", {C, F}), C, F));
    b.put(o + "mlp.fc.b", {F}, t.get(h + "mlp.c_fc.bias", {F}));
    b.put(o + "mlp.proj.w", {C, F}, transpose(t.get(h + "mlp.c_proj.weight", {F, C}), F, C));
    b.put(o + "mlp.proj.b", {C}, t.get(h + "mlp.c_proj.bias", {C}));
  }
  b.put("ln_f.w", {C}, t.get(p + "ln_f.weight", {C}));
  b.put("ln_f.b", {C}, t.get(p + "ln_f.bias", {C}));
  t.check_all_used("GPT-2", true);
  return b.m;
}

// Tensors `names` read in order (so the first missing or misshaped one is the one named), stacked.
std::vector<float> stacked(const HfTensors& t,
                           const std::vector<std::pair<std::string, std::vector<int64_t>>>& names) {
  std::vector<float> out;
  for (const auto& [name, shape] : names) out = concat(std::move(out), t.get(name, shape));
  return out;
}

// The shape of a Llama-family config.json, with what Loom cannot compute refused by name.
struct LlamaShape {
  int64_t L, H, C, F, V, Hkv, Q;
  bool tied, qwen2, qkv_bias, proj_bias;
  std::string family;  // "Llama", "Mistral", "Qwen2"
};

LlamaShape llama_shape(const json& c, const fs::path& cfg) {
  LlamaShape s{};
  s.L = key_i64(c, "num_hidden_layers", cfg), s.H = key_i64(c, "num_attention_heads", cfg);
  s.C = key_i64(c, "hidden_size", cfg), s.F = key_i64(c, "intermediate_size", cfg),
  s.V = key_i64(c, "vocab_size", cfg);
  s.Hkv = positive(field<int64_t>(c, "num_key_value_heads", s.H, cfg), "num_key_value_heads",
                   cfg.string() + ": config.json's");
  s.Q = positive(field<int64_t>(c, "head_dim", s.C / s.H, cfg), "head_dim",
                 cfg.string() + ": config.json's");
  if (s.Q * s.H != s.C)
    throw RuntimeError(cfg.string() + ": head_dim " + std::to_string(s.Q) +
                       " x heads != hidden_size (not supported)");
  s.tied = field(c, "tie_word_embeddings", false, cfg);
  // Qwen2 has q/k/v biases and no output bias; Llama's attention_bias puts biases on all four.
  const std::string type = field<std::string>(c, "model_type", "", cfg);
  s.qwen2 = type == "qwen2";
  s.qkv_bias = s.qwen2 || field(c, "attention_bias", false, cfg),
  s.proj_bias = !s.qwen2 && s.qkv_bias;
  s.family = s.qwen2 ? "Qwen2" : type == "mistral" ? "Mistral" : "Llama";
  if (field(c, "mlp_bias", false, cfg))
    throw RuntimeError(cfg.string() + ": \"mlp_bias\": true is not supported");
  const std::string act = field<std::string>(c, "hidden_act", "silu", cfg);
  if (act != "silu")
    throw RuntimeError(cfg.string() + ": \"hidden_act\": \"" + act +
                       "\" is not supported (Loom's swiglu gates with silu)");
  return s;
}

// The [model] keys. Sliding-window attention (Mistral; Qwen2 with use_sliding_window) is full
// causal attention over a sequence no longer than the window: seq_len is capped there, so the
// import is exact, and [model] sliding_window keeps a later config from going past it.
std::string llama_model_toml(const json& c, const LlamaShape& s, const fs::path& cfg) {
  // Capped where [model] max_positions is (a model stating ten million positions still imports).
  const int64_t context =
      std::min<int64_t>(field<int64_t>(c, "max_position_embeddings", 2048, cfg), int64_t(1) << 20);
  int64_t seq = std::min<int64_t>(context, 8192);
  const int64_t window = field<int64_t>(c, "sliding_window", 0, cfg);
  const bool windowed = window > 0 && field<bool>(c, "use_sliding_window", !s.qwen2,
                                                  cfg);  // Qwen2's is off unless set
  if (windowed && window < seq) {
    std::fprintf(stderr,
                 "loom: note: %s: sliding_window %lld: seq_len is capped at it (Loom attends over "
                 "whole sequences)\n",
                 cfg.c_str(), static_cast<long long>(window));
    seq = window;
  }
  std::string toml =
      toml_line("n_layer", std::to_string(s.L)) + toml_line("n_head", std::to_string(s.H)) +
      toml_line("n_kv_head", std::to_string(s.Hkv)) + toml_line("d_model", std::to_string(s.C)) +
      toml_line("d_ff", std::to_string(s.F)) + toml_line("vocab_size", std::to_string(s.V)) +
      toml_line("seq_len", std::to_string(seq)) +
      // The context it was built for, which a shorter training seq_len must not shrink on export.
      toml_line("max_positions", std::to_string(context)) +
      (windowed ? toml_line("sliding_window", std::to_string(window)) : "") +
      toml_line("positions", "\"rope\"") +
      toml_line("rope_theta", num(field(c, "rope_theta", 10000.0, cfg))) +
      toml_line("norm", "\"rmsnorm\"") +
      toml_line("norm_eps", num(field(c, "rms_norm_eps", 1e-6, cfg))) +
      toml_line("mlp", "\"swiglu\"") + toml_line("bias", "false") +
      toml_line("attention_bias", s.qwen2      ? "\"qkv\""
                                  : s.qkv_bias ? "\"all\""
                                               : "\"none\"") +
      toml_line("tied_embeddings", s.tied ? "true" : "false");
  if (!c.contains("rope_scaling") || c["rope_scaling"].is_null()) return toml;
  const json& r = c["rope_scaling"];
  if (!r.is_object())
    throw RuntimeError(cfg.string() + ": \"rope_scaling\" is " + r.dump() +
                       "; config.json gives it as an object "
                       "({\"rope_type\": \"llama3\", \"factor\": ...}) or null");
  const std::string type =
      field<std::string>(r, "rope_type", field<std::string>(r, "type", "?", cfg), cfg);
  if (type != "llama3")
    throw RuntimeError(cfg.string() + ": rope_scaling type \"" + type +
                       "\" is not supported (llama3 is)");
  return toml + "[model.rope_scaling]\n" + toml_line("type", "\"llama3\"") +
         toml_line("factor", num(field(r, "factor", 8.0, cfg))) +
         toml_line("low_freq_factor", num(field(r, "low_freq_factor", 1.0, cfg))) +
         toml_line("high_freq_factor", num(field(r, "high_freq_factor", 4.0, cfg))) +
         toml_line("original_max_position", std::to_string(field<int64_t>(
                                                r, "original_max_position_embeddings", 8192, cfg)));
}

// One layer's attention: Loom's fused [q | k | v] (multi-head) or q and [k | v] (grouped-query),
// with the biases the shape has.
void put_llama_attention(const HfTensors& t, const LlamaShape& s, const std::string& h,
                         const std::string& o, Builder& b) {
  const int64_t C = s.C, H = s.H, Hkv = s.Hkv, Q = s.Q;
  if (Hkv == H) {
    b.put(o + "attn.qkv.w", {3 * C, C},
          stacked(t, {{h + "self_attn.q_proj.weight", {C, C}},
                      {h + "self_attn.k_proj.weight", {C, C}},
                      {h + "self_attn.v_proj.weight", {C, C}}}));
    if (s.qkv_bias)
      b.put(o + "attn.qkv.b", {3 * C},
            stacked(t, {{h + "self_attn.q_proj.bias", {C}},
                        {h + "self_attn.k_proj.bias", {C}},
                        {h + "self_attn.v_proj.bias", {C}}}));
  } else {
    b.put(o + "attn.q.w", {H * Q, C}, t.get(h + "self_attn.q_proj.weight", {H * Q, C}));
    b.put(o + "attn.kv.w", {2 * Hkv * Q, C},
          stacked(t, {{h + "self_attn.k_proj.weight", {Hkv * Q, C}},
                      {h + "self_attn.v_proj.weight", {Hkv * Q, C}}}));
    if (s.qkv_bias) {
      b.put(o + "attn.q.b", {H * Q}, t.get(h + "self_attn.q_proj.bias", {H * Q}));
      b.put(o + "attn.kv.b", {2 * Hkv * Q},
            stacked(t, {{h + "self_attn.k_proj.bias", {Hkv * Q}},
                        {h + "self_attn.v_proj.bias", {Hkv * Q}}}));
    }
  }
  b.put(o + "attn.proj.w", {C, H * Q}, t.get(h + "self_attn.o_proj.weight", {C, H * Q}));
  if (s.proj_bias) b.put(o + "attn.proj.b", {C}, t.get(h + "self_attn.o_proj.bias", {C}));
}

ExternalModel read_hf_llama(const json& c, const HfTensors& t, const fs::path& cfg) {
  const LlamaShape s = llama_shape(c, cfg);
  const int64_t C = s.C, F = s.F, V = s.V, Vp = (V + 63) / 64 * 64;
  Builder b;
  b.m.source = "Hugging Face " + s.family;
  b.m.model_toml = llama_model_toml(c, s, cfg);
  b.put("wte", {Vp, C}, pad_rows(t.get("model.embed_tokens.weight", {V, C}), C, Vp));
  for (int64_t i = 0; i < s.L; ++i) {
    const std::string h = "model.layers." + std::to_string(i) + ".",
                      o = "h" + std::to_string(i) + ".";
    b.put(o + "ln1.w", {C}, t.get(h + "input_layernorm.weight", {C}));
    put_llama_attention(t, s, h, o, b);
    b.put(o + "ln2.w", {C}, t.get(h + "post_attention_layernorm.weight", {C}));
    b.put(o + "mlp.fc.w", {2 * F, C},
          stacked(t, {{h + "mlp.gate_proj.weight", {F, C}}, {h + "mlp.up_proj.weight", {F, C}}}));
    b.put(o + "mlp.proj.w", {C, F}, t.get(h + "mlp.down_proj.weight", {C, F}));
  }
  b.put("ln_f.w", {C}, t.get("model.norm.weight", {C}));
  if (!s.tied) b.put("lm_head.w", {Vp, C}, pad_rows(t.get("lm_head.weight", {V, C}), C, Vp));
  t.check_all_used(s.family, s.tied);
  return b.m;
}

}  // namespace

// The tokenizer and generation files of a folder, and a generation_config.json made from
// config.json's bos/eos ids when it has none (so generation stops where transformers' does).
static std::map<std::string, std::string> side_files(const fs::path& dir, const json& c) {
  std::map<std::string, std::string> out;
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                           "generation_config.json"})
    if (fs::exists(dir / name)) out[name] = read_file(dir / name, "Hugging Face file");
  if (!out.count("generation_config.json")) {
    json g = json::object();
    for (const char* k : {"bos_token_id", "eos_token_id"})
      if (c.contains(k) && !c[k].is_null()) g[k] = c[k];
    if (!g.empty()) out["generation_config.json"] = g.dump(2) + "\n";
  }
  return out;
}

ExternalModel read_hf(const fs::path& dir) {
  const fs::path cfg = dir / "config.json";
  std::ifstream in(cfg);
  if (!in)
    throw RuntimeError("cannot open '" + cfg.string() + "'" + os_reason() +
                       " (a Hugging Face model folder has a config.json)");
  json c;
  try {
    c = json::parse(in);
  } catch (const json::exception& e) {
    throw RuntimeError("'" + cfg.string() + "' is not JSON: " + e.what());
  }
  if (!c.is_object())
    throw RuntimeError("'" + cfg.string() + "' holds a JSON " + c.type_name() +
                       "; a Hugging Face config.json is an object "
                       "({\"model_type\": ..., ...})");
  HfTensors t;
  t.where = fs::exists(dir / "model.safetensors.index.json") ? dir / "model.safetensors.index.json"
                                                             : dir / "model.safetensors";
  if (!fs::exists(t.where))
    throw RuntimeError("'" + dir.string() +
                       "' has neither model.safetensors nor model.safetensors.index.json");
  t.entries = read_safetensors_index(t.where);
  const std::string type = field<std::string>(c, "model_type", "", cfg);
  ExternalModel m;
  if (type == "gpt2")
    m = read_hf_gpt2(c, t, cfg);
  else if (type == "llama" || type == "mistral" || type == "qwen2")
    m = read_hf_llama(c, t, cfg);
  else
    throw RuntimeError("'" + cfg.string() + "': model_type \"" + type +
                       "\" is not supported (gpt2, llama, mistral, qwen2)");
  m.side_files = side_files(dir, c);
  return m;
}

}  // namespace loom::ckpt::convert
