#include "ckpt/convert.hpp"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "ckpt/crc32c.hpp"
#include "ckpt/reader.hpp"
#include "ckpt/safetensors.hpp"
#include "config/config.hpp"
#include "core/errors.hpp"
#include "core/files.hpp"
#include "model/model.hpp"
#include "tokenizer/tokenizer.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace loom::ckpt {

namespace {

// [out, in] from a [in, out] matrix (GPT-2's Conv1D stores its weights transposed).
std::vector<float> transpose(const std::vector<float>& a, int64_t rows, int64_t cols) {
  std::vector<float> t(a.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) t[c * rows + r] = a[r * cols + c];
  return t;
}

// `a` (cols wide) zero-padded to `padded` rows: a vocabulary padded to a multiple of 64, as
// Loom's embedding and head are.
std::vector<float> pad_rows(std::vector<float> a, int64_t cols, int64_t padded) {
  a.resize(static_cast<size_t>(padded * cols), 0.f);
  return a;
}

struct Builder {
  ExternalModel m;
  void put(const std::string& name, std::vector<int64_t> shape, std::vector<float> data) {
    m.shapes[name] = std::move(shape);
    m.tensors[name] = std::move(data);
  }
};

// A safetensors tensor by its Hugging Face name, checked against the shape config.json implies.
struct HfTensors {
  std::map<std::string, StEntry> entries;
  fs::path where;
  mutable std::set<std::string> used;  // what the import read: the rest would be dropped
  std::vector<float> get(const std::string& name, const std::vector<int64_t>& shape) const {
    used.insert(name);
    auto it = entries.find(name);
    if (it == entries.end()) throw RuntimeError(where.string() + ": tensor " + name + " is missing");
    if (it->second.shape != shape) {
      auto str = [](const std::vector<int64_t>& s) {
        std::string o;
        for (int64_t d : s) o += (o.empty() ? "" : "x") + std::to_string(d);
        return o;
      };
      throw RuntimeError(where.string() + ": tensor " + name + " has shape " + str(it->second.shape) + ", config.json implies " +
                         str(shape));
    }
    return read_tensor(name, it->second);
  }
  bool has(const std::string& name) const { return entries.count(name) > 0; }

  // A tensor of the file that the import would drop (a Qwen2 q/k/v bias under a bias-free Llama
  // shape) changes the model: refused, naming them. Buffers transformers saves but recomputes
  // (rotary inv_freq, GPT-2's causal masks) and a tied head's copy are not weights.
  void check_all_used(const std::string& model, bool tied_head) const {
    std::vector<std::string> left;
    for (const auto& [name, e] : entries) {
      const bool buffer = name.ends_with("rotary_emb.inv_freq") || name.ends_with("attn.bias") ||
                          name.ends_with("attn.masked_bias") || (tied_head && name == "lm_head.weight");
      if (!used.count(name) && !buffer) left.push_back(name);
    }
    if (left.empty()) return;
    std::string names;
    for (size_t i = 0; i < left.size() && i < 4; ++i) names += (i ? ", " : "") + left[i];
    if (left.size() > 4) names += " and " + std::to_string(left.size() - 4) + " more";
    throw RuntimeError(where.string() + ": " + std::to_string(left.size()) + " of its tensors have no place in the " + model +
                       " Loom builds from config.json (" + names + "); importing without them would change the model, so "
                       "nothing is written");
  }
};

// An optional config.json field of the type it must have, or the file and key named.
template <class T>
T field(const json& c, const std::string& k, T def, const fs::path& file) {
  if (!c.contains(k) || c[k].is_null()) return def;
  try {
    return c[k].get<T>();
  } catch (const json::exception&) {
    throw RuntimeError(file.string() + ": \"" + k + "\" has the wrong type: " + c[k].dump());
  }
}

// A shape's size from config.json: every one of them counts something, so it must be >= 1 (a 0
int64_t positive(int64_t v, const std::string& what, const std::string& whose) {
  if (v < 1) throw RuntimeError(whose + " \"" + what + "\" = " + std::to_string(v) + " must be at least 1");
  return v;
}

// would divide by zero in import, generate and init_from).
int64_t key_i64(const json& c, const std::string& k, const fs::path& file) {
  if (!c.contains(k) || !c[k].is_number_integer()) throw RuntimeError(file.string() + ": config.json has no integer \"" + k + "\"");
  return positive(c[k].get<int64_t>(), k, file.string() + ": config.json's");
}

std::string toml_line(const std::string& k, const std::string& v) { return k + " = " + v + "\n"; }
std::string num(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%.9g", x);
  std::string s = b;
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

ExternalModel read_hf_gpt2(const json& c, const HfTensors& t, const fs::path& cfg) {
  const std::string act = field<std::string>(c, "activation_function", "gelu_new", cfg);
  if (act != "gelu_new" && act != "gelu_pytorch_tanh")
    throw RuntimeError(cfg.string() + ": \"activation_function\": \"" + act + "\" is not supported: Loom's gelu is the tanh "
                       "approximation (gelu_new), which would change every output");
  const int64_t L = key_i64(c, "n_layer", cfg), H = key_i64(c, "n_head", cfg), C = key_i64(c, "n_embd", cfg);
  const int64_t V = key_i64(c, "vocab_size", cfg), P = key_i64(c, "n_positions", cfg);
  const int64_t F = c.contains("n_inner") && c["n_inner"].is_number() ? c["n_inner"].get<int64_t>() : 4 * C;
  const int64_t Vp = (V + 63) / 64 * 64;
  const std::string p = t.has("transformer.wte.weight") ? "transformer." : "";
  Builder b;
  b.m.source = "Hugging Face GPT-2";
  b.m.model_toml = toml_line("n_layer", std::to_string(L)) + toml_line("n_head", std::to_string(H)) +
                   toml_line("d_model", std::to_string(C)) + toml_line("d_ff", std::to_string(F)) +
                   toml_line("vocab_size", std::to_string(V)) + toml_line("seq_len", std::to_string(P)) +
                   toml_line("max_positions", std::to_string(P)) + toml_line("positions", "\"learned\"") +
                   toml_line("norm", "\"layernorm\"") + toml_line("norm_eps", num(field(c, "layer_norm_epsilon", 1e-5, cfg))) +
                   toml_line("mlp", "\"gelu\"") + toml_line("bias", "true") + toml_line("tied_embeddings", "true");
  b.put("wte", {Vp, C}, pad_rows(t.get(p + "wte.weight", {V, C}), C, Vp));
  b.put("wpe", {P, C}, t.get(p + "wpe.weight", {P, C}));
  for (int64_t i = 0; i < L; ++i) {
    const std::string h = p + "h." + std::to_string(i) + ".", o = "h" + std::to_string(i) + ".";
    b.put(o + "ln1.w", {C}, t.get(h + "ln_1.weight", {C}));
    b.put(o + "ln1.b", {C}, t.get(h + "ln_1.bias", {C}));
    b.put(o + "attn.qkv.w", {3 * C, C}, transpose(t.get(h + "attn.c_attn.weight", {C, 3 * C}), C, 3 * C));
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

// a's rows over b's. Arguments are read in an unspecified order, so callers read a first.
std::vector<float> concat(std::vector<float> a, const std::vector<float>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Tensors `names` read in order (so the first missing or misshaped one is the one named), stacked.
std::vector<float> stacked(const HfTensors& t, const std::vector<std::pair<std::string, std::vector<int64_t>>>& names) {
  std::vector<float> out;
  for (const auto& [name, shape] : names) out = concat(std::move(out), t.get(name, shape));
  return out;
}

ExternalModel read_hf_llama(const json& c, const HfTensors& t, const fs::path& cfg) {
  const int64_t L = key_i64(c, "num_hidden_layers", cfg), H = key_i64(c, "num_attention_heads", cfg);
  const int64_t C = key_i64(c, "hidden_size", cfg), F = key_i64(c, "intermediate_size", cfg);
  const int64_t V = key_i64(c, "vocab_size", cfg);
  const int64_t Hkv = positive(field<int64_t>(c, "num_key_value_heads", H, cfg), "num_key_value_heads", cfg.string() + ": config.json's");
  const int64_t Q = positive(field<int64_t>(c, "head_dim", C / H, cfg), "head_dim", cfg.string() + ": config.json's");
  const int64_t Vp = (V + 63) / 64 * 64;
  if (Q * H != C) throw RuntimeError(cfg.string() + ": head_dim " + std::to_string(Q) + " x heads != hidden_size (not supported)");
  const bool tied = field(c, "tie_word_embeddings", false, cfg), bias = field(c, "attention_bias", false, cfg);
  if (field(c, "mlp_bias", false, cfg)) throw RuntimeError(cfg.string() + ": \"mlp_bias\": true is not supported");
  if (bias)  // Loom's one bias flag also puts biases on the MLP, which this model has not
    throw RuntimeError(cfg.string() + ": \"attention_bias\": true is not supported: Loom's [model] bias puts biases on every "
                       "linear layer, the MLP's too, and this model has them on attention only");
  Builder b;
  b.m.source = "Hugging Face Llama";
  int64_t seq = std::min<int64_t>(field<int64_t>(c, "max_position_embeddings", 2048, cfg), 8192);
  // Sliding-window attention (Mistral; Qwen2 with use_sliding_window) is full causal attention
  // over a sequence no longer than the window: seq_len is capped there, so the import is exact.
  const int64_t window = field<int64_t>(c, "sliding_window", 0, cfg);
  if (window > 0 && field<bool>(c, "use_sliding_window", true, cfg) && window < seq) {
    std::fprintf(stderr, "loom: note: %s: sliding_window %lld: seq_len is capped at it (Loom attends over whole sequences)\n",
                 cfg.c_str(), static_cast<long long>(window));
    seq = window;
  }
  std::string toml = toml_line("n_layer", std::to_string(L)) + toml_line("n_head", std::to_string(H)) +
                     toml_line("n_kv_head", std::to_string(Hkv)) + toml_line("d_model", std::to_string(C)) +
                     toml_line("d_ff", std::to_string(F)) + toml_line("vocab_size", std::to_string(V)) +
                     toml_line("seq_len", std::to_string(seq)) +
                     toml_line("positions", "\"rope\"") + toml_line("rope_theta", num(field(c, "rope_theta", 10000.0, cfg))) +
                     toml_line("norm", "\"rmsnorm\"") + toml_line("norm_eps", num(field(c, "rms_norm_eps", 1e-6, cfg))) +
                     toml_line("mlp", "\"swiglu\"") + toml_line("bias", bias ? "true" : "false") +
                     toml_line("tied_embeddings", tied ? "true" : "false");
  if (c.contains("rope_scaling") && c["rope_scaling"].is_object()) {
    const json& r = c["rope_scaling"];
    const std::string type = field<std::string>(r, "rope_type", field<std::string>(r, "type", "?", cfg), cfg);
    if (type != "llama3")
      throw RuntimeError(cfg.string() + ": rope_scaling type \"" + type + "\" is not supported (llama3 is)");
    toml += "[model.rope_scaling]\n" + toml_line("type", "\"llama3\"") + toml_line("factor", num(field(r, "factor", 8.0, cfg))) +
            toml_line("low_freq_factor", num(field(r, "low_freq_factor", 1.0, cfg))) +
            toml_line("high_freq_factor", num(field(r, "high_freq_factor", 4.0, cfg))) +
            toml_line("original_max_position",
                      std::to_string(field<int64_t>(r, "original_max_position_embeddings", 8192, cfg)));
  }
  b.m.model_toml = toml;
  b.put("wte", {Vp, C}, pad_rows(t.get("model.embed_tokens.weight", {V, C}), C, Vp));
  for (int64_t i = 0; i < L; ++i) {
    const std::string h = "model.layers." + std::to_string(i) + ".", o = "h" + std::to_string(i) + ".";
    b.put(o + "ln1.w", {C}, t.get(h + "input_layernorm.weight", {C}));
    if (Hkv == H) {  // multi-head: Loom's fused [q | k | v] weight
      b.put(o + "attn.qkv.w", {3 * C, C},
            stacked(t, {{h + "self_attn.q_proj.weight", {C, C}}, {h + "self_attn.k_proj.weight", {C, C}},
                        {h + "self_attn.v_proj.weight", {C, C}}}));
      if (bias)
        b.put(o + "attn.qkv.b", {3 * C},
              stacked(t, {{h + "self_attn.q_proj.bias", {C}}, {h + "self_attn.k_proj.bias", {C}},
                          {h + "self_attn.v_proj.bias", {C}}}));
    } else {
      b.put(o + "attn.q.w", {H * Q, C}, t.get(h + "self_attn.q_proj.weight", {H * Q, C}));
      b.put(o + "attn.kv.w", {2 * Hkv * Q, C},
            stacked(t, {{h + "self_attn.k_proj.weight", {Hkv * Q, C}}, {h + "self_attn.v_proj.weight", {Hkv * Q, C}}}));
      if (bias) {
        b.put(o + "attn.q.b", {H * Q}, t.get(h + "self_attn.q_proj.bias", {H * Q}));
        b.put(o + "attn.kv.b", {2 * Hkv * Q},
              stacked(t, {{h + "self_attn.k_proj.bias", {Hkv * Q}}, {h + "self_attn.v_proj.bias", {Hkv * Q}}}));
      }
    }
    b.put(o + "attn.proj.w", {C, H * Q}, t.get(h + "self_attn.o_proj.weight", {C, H * Q}));
    if (bias) b.put(o + "attn.proj.b", {C}, t.get(h + "self_attn.o_proj.bias", {C}));
    b.put(o + "ln2.w", {C}, t.get(h + "post_attention_layernorm.weight", {C}));
    b.put(o + "mlp.fc.w", {2 * F, C}, stacked(t, {{h + "mlp.gate_proj.weight", {F, C}}, {h + "mlp.up_proj.weight", {F, C}}}));
    b.put(o + "mlp.proj.w", {C, F}, t.get(h + "mlp.down_proj.weight", {C, F}));
  }
  b.put("ln_f.w", {C}, t.get("model.norm.weight", {C}));
  if (!tied) b.put("lm_head.w", {Vp, C}, pad_rows(t.get("lm_head.weight", {V, C}), C, Vp));
  t.check_all_used("Llama", tied);
  return b.m;
}

ExternalModel read_hf(const fs::path& dir) {
  const fs::path cfg = dir / "config.json";
  std::ifstream in(cfg);
  if (!in) throw RuntimeError("cannot open '" + cfg.string() + "'" + os_reason() + " (a Hugging Face model folder has a config.json)");
  json c;
  try {
    c = json::parse(in);
  } catch (const json::exception& e) {
    throw RuntimeError("'" + cfg.string() + "' is not JSON: " + e.what());
  }
  HfTensors t;
  t.where = fs::exists(dir / "model.safetensors.index.json") ? dir / "model.safetensors.index.json" : dir / "model.safetensors";
  if (!fs::exists(t.where)) throw RuntimeError("'" + dir.string() + "' has neither model.safetensors nor model.safetensors.index.json");
  t.entries = read_safetensors_index(t.where);
  const std::string type = field<std::string>(c, "model_type", "", cfg);
  if (type == "gpt2") return read_hf_gpt2(c, t, cfg);
  if (type == "llama" || type == "mistral" || type == "qwen2") return read_hf_llama(c, t, cfg);
  throw RuntimeError("'" + cfg.string() + "': model_type \"" + type + "\" is not supported (gpt2, llama)");
}

float bf16_to_float(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// llm.c's GPT-2 file: 256 int32 (magic 20240326, version 3 = fp32 or 5 = bf16, max_seq_len,
// vocab_size, num_layers, num_heads, channels, padded_vocab_size) then the tensors in its order,
// each layer-stacked, weights [out, in].
ExternalModel read_llmc(const fs::path& file) {
  const std::string where = "llm.c model '" + file.string() + "': ";
  std::ifstream in = open_input(file, "llm.c model");
  int32_t h[256];
  if (!in.read(reinterpret_cast<char*>(h), sizeof h)) throw RuntimeError(where + "shorter than its 1024-byte header");
  if (h[0] != 20240326) throw RuntimeError(where + "bad magic " + std::to_string(h[0]) + " (expected 20240326)");
  if (h[1] != 3 && h[1] != 5) throw RuntimeError(where + "version " + std::to_string(h[1]) + " is not supported (3: fp32, 5: bf16)");
  const int64_t T = positive(h[2], "max_seq_len", where + "header's"), V = positive(h[3], "vocab_size", where + "header's");
  const int64_t L = positive(h[4], "num_layers", where + "header's"), H = positive(h[5], "num_heads", where + "header's");
  const int64_t C = positive(h[6], "channels", where + "header's"), Vp = positive(h[7], "padded_vocab_size", where + "header's");
  const int64_t width = h[1] == 3 ? 4 : 2;
  if (C % H != 0 || Vp < V)
    throw RuntimeError(where + "channels " + std::to_string(C) + " over " + std::to_string(H) + " heads, vocabulary " +
                       std::to_string(V) + " padded to " + std::to_string(Vp) + ": not a GPT-2 shape");
  const std::vector<std::pair<std::string, std::vector<int64_t>>> order = {
      {"wte", {Vp, C}}, {"wpe", {T, C}}, {"ln1.w", {L, C}}, {"ln1.b", {L, C}}, {"attn.qkv.w", {L, 3 * C, C}},
      {"attn.qkv.b", {L, 3 * C}}, {"attn.proj.w", {L, C, C}}, {"attn.proj.b", {L, C}}, {"ln2.w", {L, C}},
      {"ln2.b", {L, C}}, {"mlp.fc.w", {L, 4 * C, C}}, {"mlp.fc.b", {L, 4 * C}}, {"mlp.proj.w", {L, C, 4 * C}},
      {"mlp.proj.b", {L, C}}, {"ln_f.w", {C}}, {"ln_f.b", {C}}};
  int64_t total = 0;
  for (const auto& [n, s] : order) {
    int64_t k = 1;
    for (int64_t d : s) k *= d;
    total += k;
  }
  const uintmax_t expect = 1024 + static_cast<uintmax_t>(total * width);
  if (fs::file_size(file) != expect)
    throw RuntimeError(where + "the header's shape needs " + std::to_string(expect) + " bytes, the file has " +
                       std::to_string(fs::file_size(file)));
  Builder b;
  b.m.source = std::string("llm.c (version ") + std::to_string(h[1]) + (h[1] == 3 ? ", fp32)" : ", bf16)");
  b.m.model_toml = toml_line("n_layer", std::to_string(L)) + toml_line("n_head", std::to_string(H)) +
                   toml_line("d_model", std::to_string(C)) + toml_line("d_ff", std::to_string(4 * C)) +
                   toml_line("vocab_size", std::to_string(V)) + toml_line("seq_len", std::to_string(T)) +
                   toml_line("max_positions", std::to_string(T)) + toml_line("positions", "\"learned\"") +
                   toml_line("norm", "\"layernorm\"") + toml_line("mlp", "\"gelu\"") + toml_line("bias", "true") +
                   toml_line("tied_embeddings", "true");
  const int64_t Vl = (V + 63) / 64 * 64;
  for (const auto& [name, shape] : order) {
    int64_t k = 1;
    for (int64_t d : shape) k *= d;
    std::vector<float> data(k);
    if (width == 4) {
      in.read(reinterpret_cast<char*>(data.data()), 4 * k);
    } else {
      std::vector<uint16_t> raw(k);
      in.read(reinterpret_cast<char*>(raw.data()), 2 * k);
      for (int64_t i = 0; i < k; ++i) data[i] = bf16_to_float(raw[i]);
    }
    if (name == "wte") {  // llm.c pads to 128; Loom to 64 rows: keep the real ones
      data.resize(V * C);
      b.put("wte", {Vl, C}, pad_rows(std::move(data), C, Vl));
    } else if (shape.size() == 1 || name == "wpe") {
      b.put(name, shape, std::move(data));
    } else {  // one tensor per layer
      const int64_t per = k / L;
      std::vector<int64_t> s(shape.begin() + 1, shape.end());
      for (int64_t l = 0; l < L; ++l)
        b.put("h" + std::to_string(l) + "." + name, s, std::vector<float>(data.begin() + l * per, data.begin() + (l + 1) * per));
    }
  }
  return b.m;
}

}  // namespace

ExternalModel read_external(const fs::path& src) {
  if (fs::is_directory(src)) return read_hf(src);
  if (!fs::exists(src)) throw RuntimeError("'" + src.string() + "' does not exist");
  return read_llmc(src);
}

void check_import_target(const fs::path& root) {
  const std::string held = existing_checkpoints(root);
  if (!held.empty())
    throw ConfigError("'" + root.string() + "' already holds checkpoints (" + held + "); an import writes step-00000000 and "
                      "points `latest` at it, so a later resume = \"latest\" there would start that run over. Import into "
                      "a new directory and name it in [model] init_from or checkpoint.resume");
  fs::path existing = root;  // the directory, or the nearest parent that exists: nothing is created yet
  std::error_code ec;
  while (!existing.empty() && !fs::exists(existing, ec)) existing = existing.parent_path();
  if (existing.empty()) existing = ".";
  if (!fs::is_directory(existing, ec)) throw RuntimeError("cannot import into '" + root.string() + "': '" + existing.string() + "' is a file");
  if (::access(existing.c_str(), W_OK) != 0)
    throw RuntimeError("cannot import into '" + root.string() + "': '" + existing.string() + "' is not writable: " + std::strerror(errno));
}

void write_as_checkpoint(const ExternalModel& m, const fs::path& root) {
  check_import_target(root);
  const std::string name = step_name(0);
  const fs::path tmp = root / (name + ".tmp"), dir = root / name;
  fs::create_directories(tmp);
  Manifest man;
  man.layout = {{"world", 1}, {"dp", 1}, {"tp", 1}, {"pp", 1}, {"ep", 1}, {"cp", 1}};
  man.precision = "fp32";
  man.precision_state.name = "precision.bin";
  man.config = "# imported from " + m.source + "\n[model]\n" + m.model_toml;
  File f;
  f.name = "rank-00000.bin";
  OutputFile out(tmp / f.name, "checkpoint file");
  uint32_t crc = 0;
  int64_t offset = 0;
  for (const auto& [tensor, data] : m.tensors) {
    for (const char* suffix : {"", ".adam_m", ".adam_v"}) {
      Part p;
      p.tensor = tensor + suffix;
      p.local_shape = m.shapes.at(tensor);
      p.offset = offset;
      f.parts.push_back(p);
      man.shapes[p.tensor] = p.local_shape;
      const std::vector<float> zeros(*suffix ? data.size() : 0, 0.f);
      const std::vector<float>& w = *suffix ? zeros : data;
      out.append(w.data(), 4 * w.size());
      crc = crc32c(w.data(), 4 * w.size(), crc);
      offset += static_cast<int64_t>(4 * w.size());
    }
  }
  out.commit(true);
  f.bytes = offset;
  f.crc32c = crc;
  man.files.push_back(f);
  std::ofstream(tmp / "precision.bin", std::ios::binary).close();
  man.precision_state.crc32c = crc32c(nullptr, 0);
  write_json(tmp / "manifest.json", man);
  check_coverage(tmp, man);
  if (fs::exists(dir)) fs::remove_all(dir);
  fs::rename(tmp, dir);
  write_durable(root / "latest", name + "\n");
  write_durable(root / "model.toml", man.config);
}

namespace {

// Rows [first, first + n) of a matrix `cols` wide.
std::vector<float> row_block(const std::vector<float>& a, int64_t first, int64_t n, int64_t cols) {
  return std::vector<float>(a.begin() + first * cols, a.begin() + (first + n) * cols);
}

// A checkpoint's global tensors by Loom name, each assembled from whatever layout wrote it.
class CheckpointTensors {
 public:
  CheckpointTensors(const fs::path& step_dir, const Manifest& m) : dir_(step_dir), m_(m), source_(step_dir, m) {}
  std::vector<float> operator()(const std::string& name) { return assemble(dir_, m_, name, files_, source_.reader()); }

 private:
  const fs::path& dir_;
  const Manifest& m_;
  std::map<std::string, std::vector<char>> files_;  // the checkpoint's files, read once each
  const CheckpointReader source_;
};

// A Hugging Face folder's tensors by their names there, in the order they are written.
struct HfTensorList {
  std::vector<std::pair<std::string, std::vector<int64_t>>> shapes;
  std::vector<std::vector<float>> data;
  void put(const std::string& n, std::vector<int64_t> s, std::vector<float> d) {
    shapes.emplace_back(n, std::move(s));
    data.push_back(std::move(d));
  }
};

// The model of a checkpoint's config, when a Hugging Face class can hold it.
model::Config exportable_model(const config::Config& cfg) {
  const model::Config c = model::from_config(cfg);
  if (c.moe.experts > 0) throw RuntimeError("exporting a mixture-of-experts model to Hugging Face is not supported");
  const bool llama = c.rope();
  if (!llama && (c.norm != "layernorm" || c.mlp != "gelu" || !c.bias || !c.tied_embeddings || !c.learned_positions()))
    throw RuntimeError("this model is neither GPT-2 shaped (learned positions, LayerNorm, GELU, biases, tied) nor "
                       "Llama shaped (RoPE): no Hugging Face class holds it");
  if (llama && (c.norm != "rmsnorm" || c.mlp != "swiglu"))
    throw RuntimeError("a RoPE model exports as Llama, which needs norm = \"rmsnorm\" and mlp = \"swiglu\"");
  if (llama && c.bias)  // its config would say attention_bias, and transformers would start the MLP biases at 0
    throw RuntimeError("exporting a RoPE model with [model] bias = true is not supported: the Llama export writes no bias "
                       "tensors, and transformers would start them at zero");
  return c;
}

// GPT-2's Conv1D weights are [in, out]: Loom's [out, in] transposed.
void put_gpt2_tensors(const model::Config& c, CheckpointTensors& get, HfTensorList& t) {
  const int64_t C = c.d_model, V = c.vocab_size, F = c.d_ff;
  t.put("transformer.wte.weight", {V, C}, row_block(get("wte"), 0, V, C));
  t.put("transformer.wpe.weight", {c.max_positions, C}, get("wpe"));
  for (int64_t i = 0; i < c.n_layer; ++i) {
    const std::string h = "transformer.h." + std::to_string(i) + ".", o = "h" + std::to_string(i) + ".";
    t.put(h + "ln_1.weight", {C}, get(o + "ln1.w"));
    t.put(h + "ln_1.bias", {C}, get(o + "ln1.b"));
    t.put(h + "attn.c_attn.weight", {C, 3 * C}, transpose(get(o + "attn.qkv.w"), 3 * C, C));
    t.put(h + "attn.c_attn.bias", {3 * C}, get(o + "attn.qkv.b"));
    t.put(h + "attn.c_proj.weight", {C, C}, transpose(get(o + "attn.proj.w"), C, C));
    t.put(h + "attn.c_proj.bias", {C}, get(o + "attn.proj.b"));
    t.put(h + "ln_2.weight", {C}, get(o + "ln2.w"));
    t.put(h + "ln_2.bias", {C}, get(o + "ln2.b"));
    t.put(h + "mlp.c_fc.weight", {C, F}, transpose(get(o + "mlp.fc.w"), F, C));
    t.put(h + "mlp.c_fc.bias", {F}, get(o + "mlp.fc.b"));
    t.put(h + "mlp.c_proj.weight", {F, C}, transpose(get(o + "mlp.proj.w"), C, F));
    t.put(h + "mlp.c_proj.bias", {C}, get(o + "mlp.proj.b"));
  }
  t.put("transformer.ln_f.weight", {C}, get("ln_f.w"));
  t.put("transformer.ln_f.bias", {C}, get("ln_f.b"));
}

json gpt2_config(const model::Config& c) {
  const int64_t C = c.d_model, V = c.vocab_size, F = c.d_ff, H = c.n_head;
  return {{"architectures", {"GPT2LMHeadModel"}}, {"model_type", "gpt2"}, {"n_layer", c.n_layer}, {"n_head", H},
          {"n_embd", C}, {"n_inner", F}, {"vocab_size", V}, {"n_positions", c.max_positions}, {"n_ctx", c.max_positions},
          {"layer_norm_epsilon", c.norm_eps}, {"activation_function", "gelu_new"}, {"resid_pdrop", 0.0},
          {"embd_pdrop", 0.0}, {"attn_pdrop", 0.0}, {"tie_word_embeddings", true}, {"torch_dtype", "float32"}};
}

// Loom's fused [q | k | v] (multi-head) or q and [k | v] (grouped-query) weights, split.
void put_llama_qkv(const model::Config& c, CheckpointTensors& get, const std::string& h, const std::string& o,
                   HfTensorList& t) {
  const int64_t C = c.d_model, Q = c.head_dim(), H = c.n_head, Hkv = c.kv_heads();
  if (Hkv == H) {
    const std::vector<float> qkv = get(o + "attn.qkv.w");
    t.put(h + "self_attn.q_proj.weight", {C, C}, row_block(qkv, 0, C, C));
    t.put(h + "self_attn.k_proj.weight", {C, C}, row_block(qkv, C, C, C));
    t.put(h + "self_attn.v_proj.weight", {C, C}, row_block(qkv, 2 * C, C, C));
  } else {
    const std::vector<float> kv = get(o + "attn.kv.w");
    t.put(h + "self_attn.q_proj.weight", {H * Q, C}, get(o + "attn.q.w"));
    t.put(h + "self_attn.k_proj.weight", {Hkv * Q, C}, row_block(kv, 0, Hkv * Q, C));
    t.put(h + "self_attn.v_proj.weight", {Hkv * Q, C}, row_block(kv, Hkv * Q, Hkv * Q, C));
  }
}

void put_llama_tensors(const model::Config& c, CheckpointTensors& get, HfTensorList& t) {
  const int64_t C = c.d_model, V = c.vocab_size, F = c.d_ff, Q = c.head_dim(), H = c.n_head;
  t.put("model.embed_tokens.weight", {V, C}, row_block(get("wte"), 0, V, C));
  for (int64_t i = 0; i < c.n_layer; ++i) {
    const std::string h = "model.layers." + std::to_string(i) + ".", o = "h" + std::to_string(i) + ".";
    t.put(h + "input_layernorm.weight", {C}, get(o + "ln1.w"));
    put_llama_qkv(c, get, h, o, t);
    t.put(h + "self_attn.o_proj.weight", {C, H * Q}, get(o + "attn.proj.w"));
    t.put(h + "post_attention_layernorm.weight", {C}, get(o + "ln2.w"));
    const std::vector<float> fc = get(o + "mlp.fc.w");  // [gate | up]
    t.put(h + "mlp.gate_proj.weight", {F, C}, row_block(fc, 0, F, C));
    t.put(h + "mlp.up_proj.weight", {F, C}, row_block(fc, F, F, C));
    t.put(h + "mlp.down_proj.weight", {C, F}, get(o + "mlp.proj.w"));
  }
  t.put("model.norm.weight", {C}, get("ln_f.w"));
  if (!c.tied_embeddings) t.put("lm_head.weight", {V, C}, row_block(get("lm_head.w"), 0, V, C));
}

json llama_config(const model::Config& c) {
  const int64_t C = c.d_model, V = c.vocab_size, F = c.d_ff, H = c.n_head, Hkv = c.kv_heads();
  json config = {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"num_hidden_layers", c.n_layer},
                 {"num_attention_heads", H}, {"num_key_value_heads", Hkv}, {"hidden_size", C}, {"intermediate_size", F},
                 {"vocab_size", V}, {"max_position_embeddings", c.seq_len}, {"rms_norm_eps", c.norm_eps},
                 {"rope_theta", c.rope_theta}, {"hidden_act", "silu"}, {"attention_bias", c.bias}, {"mlp_bias", false},
                 {"tie_word_embeddings", c.tied_embeddings}, {"torch_dtype", "float32"}};
  if (c.rope_scaling.type == "llama3")
    config["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", c.rope_scaling.factor},
                              {"low_freq_factor", c.rope_scaling.low_freq_factor},
                              {"high_freq_factor", c.rope_scaling.high_freq_factor},
                              {"original_max_position_embeddings", c.rope_scaling.original_max_position}};
  return config;
}

void write_safetensors_file(const fs::path& file, const HfTensorList& t, int64_t step) {
  std::vector<const std::vector<float>*> ptrs;
  for (const auto& d : t.data) ptrs.push_back(&d);
  write_safetensors(file, t.shapes, ptrs, {{"format", "pt"}, {"loom_step", std::to_string(step)}});
}

}  // namespace

void write_hf_folder(const fs::path& step_dir, const Manifest& m, const fs::path& out, const fs::path& tokenizer) {
  config::Config cfg = config::Config::parse(m.config, (step_dir / "manifest.json").string());
  cfg.validate_runtime();
  const model::Config c = exportable_model(cfg);
  const bool llama = c.rope();
  CheckpointTensors get(step_dir, m);
  HfTensorList tensors;
  if (llama) put_llama_tensors(c, get, tensors);
  else put_gpt2_tensors(c, get, tensors);
  const json config = llama ? llama_config(c) : gpt2_config(c);
  fs::create_directories(out);
  write_safetensors_file(out / "model.safetensors", tensors, m.step);
  write_durable(out / "config.json", config.dump(2) + "\n");
  // The run's tokenizer goes along unless another is named: [data] tokenizer, or beside the shards.
  const fs::path tj = tokenizer.empty() ? tok::run_tokenizer_path(cfg) : tokenizer;
  if (!tj.empty()) fs::copy_file(tj, out / "tokenizer.json", fs::copy_options::overwrite_existing);
}

}  // namespace loom::ckpt
