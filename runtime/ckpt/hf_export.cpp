// A Loom checkpoint as a Hugging Face folder: the weights under transformers' names, config.json,
// and what a plain transformers script needs beside them.
#include <nlohmann/json.hpp>
#include <optional>

#include "ckpt/convert.hpp"
#include "ckpt/convert_util.hpp"
#include "ckpt/reader.hpp"
#include "ckpt/safetensors.hpp"
#include "config/config.hpp"
#include "config/section.hpp"
#include "core/files.hpp"
#include "data/data_settings.hpp"
#include "model/model.hpp"
#include "tokenizer/special_ids.hpp"
#include "tokenizer/tokenizer.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace loom::ckpt {

namespace {

using convert::concat;
using convert::row_block;
using convert::transpose;

// A checkpoint's global tensors by Loom name, each assembled from whatever layout wrote it.
class CheckpointTensors {
 public:
  CheckpointTensors(const fs::path& step_dir, const Manifest& m)
      : dir_(step_dir), m_(m), source_(step_dir, m) {}
  std::vector<float> operator()(const std::string& name) {
    return assemble(dir_, m_, name, files_, source_.reader());
  }

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

// A checkpoint's model, when a Hugging Face class can hold it.
model::Config exportable_model(const model::Config& c) {
  if (c.moe.experts > 0)
    throw RuntimeError("exporting a mixture-of-experts model to Hugging Face is not supported");
  const bool llama = c.rope();
  const bool gelu = c.mlp == "gelu" || c.mlp == "gelu_exact";
  if (!llama && (c.norm != "layernorm" || !gelu || !c.bias || c.attention_bias != "as_bias" ||
                 !c.tied_embeddings || !c.learned_positions()))
    throw RuntimeError(
        "this model is neither GPT-2 shaped (learned positions, LayerNorm, GELU, biases, tied) nor "
        "Llama shaped (RoPE): no Hugging Face class holds it");
  if (llama && (c.norm != "rmsnorm" || c.mlp != "swiglu"))
    throw RuntimeError(
        "a RoPE model exports as Llama, which needs norm = \"rmsnorm\" and mlp = \"swiglu\"");
  if (llama && c.bias)  // Llama's MLP and norms have no biases (mlp_bias is all-or-nothing and
                        // RMSNorm has none)
    throw RuntimeError(
        "exporting a RoPE model with [model] bias = true is not supported: no Hugging Face "
        "Llama-family "
        "class has biases on its norms; use bias = false with attention_bias = \"all\" (Llama) or "
        "\"qkv\" (Qwen2)");
  return c;
}

// GPT-2's Conv1D weights are [in, out]: Loom's [out, in] transposed.
void put_gpt2_tensors(const model::Config& c, CheckpointTensors& get, HfTensorList& t) {
  const int64_t C = c.d_model, V = c.vocab_size, F = c.d_ff;
  t.put("transformer.wte.weight", {V, C}, row_block(get("wte"), 0, V, C));
  t.put("transformer.wpe.weight", {c.max_positions, C}, get("wpe"));
  for (int64_t i = 0; i < c.n_layer; ++i) {
    const std::string h = "transformer.h." + std::to_string(i) + ".",
                      o = "h" + std::to_string(i) + ".";
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
  return {{"architectures", {"GPT2LMHeadModel"}},
          {"model_type", "gpt2"},
          {"n_layer", c.n_layer},
          {"n_head", H},
          {"n_embd", C},
          {"n_inner", F},
          {"vocab_size", V},
          {"n_positions", c.max_positions},
          {"n_ctx", c.max_positions},
          {"layer_norm_epsilon", c.norm_eps},
          {"activation_function", c.mlp == "gelu_exact" ? "gelu" : "gelu_new"},
          {"resid_pdrop", 0.0},
          {"embd_pdrop", 0.0},
          {"attn_pdrop", 0.0},
          {"tie_word_embeddings", true},
          {"torch_dtype", "float32"}};
}

// Loom's fused [q | k | v] (multi-head) or q and [k | v] (grouped-query) weights, split.
void put_llama_qkv(const model::Config& c, CheckpointTensors& get, const std::string& h,
                   const std::string& o, HfTensorList& t) {
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

// The attention biases, q/k/v split as the weights are, and the output projection's.
void put_llama_biases(const model::Config& c, CheckpointTensors& get, const std::string& h,
                      const std::string& o, HfTensorList& t) {
  const int64_t C = c.d_model, Q = c.head_dim(), H = c.n_head, Hkv = c.kv_heads();
  if (c.qkv_bias()) {
    std::vector<float> qkv = c.grouped_query() ? get(o + "attn.q.b") : get(o + "attn.qkv.b");
    if (c.grouped_query()) qkv = concat(std::move(qkv), get(o + "attn.kv.b"));
    t.put(h + "self_attn.q_proj.bias", {H * Q}, row_block(qkv, 0, H * Q, 1));
    t.put(h + "self_attn.k_proj.bias", {Hkv * Q}, row_block(qkv, H * Q, Hkv * Q, 1));
    t.put(h + "self_attn.v_proj.bias", {Hkv * Q}, row_block(qkv, (H + Hkv) * Q, Hkv * Q, 1));
  }
  if (c.proj_bias()) t.put(h + "self_attn.o_proj.bias", {C}, get(o + "attn.proj.b"));
}

void put_llama_tensors(const model::Config& c, CheckpointTensors& get, HfTensorList& t) {
  const int64_t C = c.d_model, V = c.vocab_size, F = c.d_ff, Q = c.head_dim(), H = c.n_head;
  t.put("model.embed_tokens.weight", {V, C}, row_block(get("wte"), 0, V, C));
  for (int64_t i = 0; i < c.n_layer; ++i) {
    const std::string h = "model.layers." + std::to_string(i) + ".",
                      o = "h" + std::to_string(i) + ".";
    t.put(h + "input_layernorm.weight", {C}, get(o + "ln1.w"));
    put_llama_qkv(c, get, h, o, t);
    put_llama_biases(c, get, h, o, t);
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
  // q/k/v biases without an output bias is Qwen2's shape; Llama's attention_bias has all four.
  const bool qwen2 = c.qkv_bias() && !c.proj_bias();
  json config = {{"architectures", {qwen2 ? "Qwen2ForCausalLM" : "LlamaForCausalLM"}},
                 {"model_type", qwen2 ? "qwen2" : "llama"},
                 {"num_hidden_layers", c.n_layer},
                 {"num_attention_heads", H},
                 {"num_key_value_heads", Hkv},
                 {"hidden_size", C},
                 {"intermediate_size", F},
                 {"vocab_size", V},
                 {"max_position_embeddings", c.context()},
                 {"rms_norm_eps", c.norm_eps},
                 {"rope_theta", c.rope_theta},
                 {"hidden_act", "silu"},
                 {"attention_bias", c.proj_bias()},
                 {"mlp_bias", false},
                 {"tie_word_embeddings", c.tied_embeddings},
                 {"torch_dtype", "float32"}};
  if (qwen2) config["use_sliding_window"] = false;
  if (c.rope_scaling.type == "llama3")
    config["rope_scaling"] = {
        {"rope_type", "llama3"},
        {"factor", c.rope_scaling.factor},
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

namespace {

// The tokenizer that goes with the weights: the one named, the run's ([data] tokenizer, or beside
// its shards), the one an import put beside the checkpoint, or for a 256-token model the bytes
// themselves. Empty when there is none.
std::optional<tok::Tokenizer> export_tokenizer(const fs::path& named,
                                               const data::DataSettings& data, const fs::path& root,
                                               int64_t vocab_size, bool& imported) {
  fs::path path = named.empty() ? data.tokenizer_path() : named;
  imported = path.empty() && fs::exists(root / "tokenizer.json");
  if (imported) path = root / "tokenizer.json";
  if (!path.empty()) return tok::Tokenizer::from_json_file(path);
  if (vocab_size == 256) return tok::Tokenizer::train({}, 256, {});
  return std::nullopt;
}

// bos/eos: an import's generation_config.json; else the tokenizer's: its post-processor's first
// token starts a text, <|endoftext|> ends one (and starts one too when nothing else does, as
// GPT-2).
tok::SpecialIds export_special_ids(const fs::path& root,
                                   const std::optional<tok::Tokenizer>& tokenizer) {
  tok::SpecialIds ids = tok::read_special_ids(root);
  for (int64_t id : ids.eos)
    if (id < 0)
      throw RuntimeError("'" + (root / "generation_config.json").string() + "': eos token id " +
                         std::to_string(id) + " is negative");
  if (ids.bos >= 0 || !ids.eos.empty() || !tokenizer) return ids;
  for (const char* end : {"<|endoftext|>", "<|end_of_text|>", "</s>"})
    if (tokenizer->special(end) >= 0 && ids.eos.empty()) ids.eos.push_back(tokenizer->special(end));
  ids.bos = !tokenizer->prefix().empty() ? tokenizer->prefix()[0]
            : ids.eos.empty()            ? -1
                                         : ids.eos[0];
  return ids;
}

json id_or_list(const std::vector<int64_t>& ids) {
  return ids.size() == 1 ? json(ids[0]) : json(ids);
}

// tokenizer.json, tokenizer_config.json and special_tokens_map.json (an import's own when it
// brought them), and generation_config.json: what AutoTokenizer, generate and pipeline read.
void write_generation_files(const fs::path& out, const fs::path& root,
                            const std::optional<tok::Tokenizer>& tokenizer, bool imported_tokenizer,
                            const tok::SpecialIds& ids, int64_t seq_len) {
  json special = json::object(), gen = {{"do_sample", false}};
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"})
    fs::remove(out / name);  // an earlier export's, which this one may not replace
  if (ids.bos >= 0) gen["bos_token_id"] = ids.bos;
  if (!ids.eos.empty()) gen["eos_token_id"] = id_or_list(ids.eos);
  write_durable(out / "generation_config.json", gen.dump(2) + "\n");
  if (!tokenizer) {
    std::fprintf(stderr,
                 "loom: note: no tokenizer.json was found for this model: pass --tokenizer FILE so "
                 "AutoTokenizer can load it\n");
    return;
  }
  tokenizer->save_json(out / "tokenizer.json");
  // The ids stay in the generation config as given; a token's text is written only for a token the
  // tokenizer has (GPT-2's config names 50256 even for a smaller test vocabulary).
  const auto known = [&](int64_t id) { return id >= 0 && id < tokenizer->vocab_size(); };
  if (known(ids.bos)) special["bos_token"] = tokenizer->token_bytes(static_cast<uint32_t>(ids.bos));
  if (!ids.eos.empty() && known(ids.eos[0]))
    special["eos_token"] = tokenizer->token_bytes(static_cast<uint32_t>(ids.eos[0]));
  // An import's own tokenizer files go along with its own tokenizer, not with another one.
  const auto theirs = [&](const char* name) {
    return imported_tokenizer && fs::exists(root / name);
  };
  for (const char* name : {"tokenizer_config.json", "special_tokens_map.json"})
    if (theirs(name)) fs::copy_file(root / name, out / name, fs::copy_options::overwrite_existing);
  if (!theirs("special_tokens_map.json"))
    write_durable(out / "special_tokens_map.json", special.dump(2) + "\n");
  if (theirs("tokenizer_config.json")) return;
  json config = special;
  config["tokenizer_class"] = "PreTrainedTokenizerFast";
  config["model_max_length"] = seq_len;
  config["clean_up_tokenization_spaces"] = false;
  config["model_input_names"] = {"input_ids",
                                 "attention_mask"};  // not token_type_ids, which generate refuses
  write_durable(out / "tokenizer_config.json", config.dump(2) + "\n");
}

}  // namespace

void write_hf_folder(const fs::path& step_dir, const Manifest& m, const fs::path& out,
                     const fs::path& tokenizer) {
  config::Config cfg = config::Config::parse(m.config, (step_dir / "manifest.json").string());
  std::vector<config::SectionSpec> read =
      model::model_sections();  // exportable_model's and the tokenizer's
  read.push_back(data::data_section());
  cfg.check_sections(read);
  const model::Config c = exportable_model(model::read_model(cfg.section("model")));
  const bool llama = c.rope();
  const fs::path root =
      step_dir.parent_path();  // where an import put the tokenizer and generation files
  bool imported_tokenizer = false;
  const std::optional<tok::Tokenizer> tok = export_tokenizer(
      tokenizer, data::read_data(cfg.section("data")), root, c.vocab_size, imported_tokenizer);
  if (tok && tok->vocab_size() > c.vocab_size)
    throw RuntimeError("the tokenizer has " + std::to_string(tok->vocab_size()) +
                       " tokens and the model's vocabulary " + std::to_string(c.vocab_size) +
                       ": transformers would index past the embedding");
  const tok::SpecialIds ids = export_special_ids(root, tok);
  CheckpointTensors get(step_dir, m);
  HfTensorList tensors;
  if (llama)
    put_llama_tensors(c, get, tensors);
  else
    put_gpt2_tensors(c, get, tensors);
  json config = llama ? llama_config(c) : gpt2_config(c);
  if (ids.bos >= 0) config["bos_token_id"] = ids.bos;
  if (!ids.eos.empty()) config["eos_token_id"] = id_or_list(ids.eos);
  fs::create_directories(out);
  write_safetensors_file(out / "model.safetensors", tensors, m.step);
  write_durable(out / "config.json", config.dump(2) + "\n");
  write_generation_files(out, root, tok, imported_tokenizer, ids, c.context());
}

}  // namespace loom::ckpt
