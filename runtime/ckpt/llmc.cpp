// llm.c's GPT-2 model files (gpt2_124M.bin and the like) into Loom's names and layouts.
#include <cstring>
#include <fstream>

#include "ckpt/convert_util.hpp"
#include "core/files.hpp"

namespace fs = std::filesystem;

namespace loom::ckpt::convert {

namespace {

float bf16_to_float(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// The tensors of llm.c's file in its order, each layer-stacked, weights [out, in].
std::vector<std::pair<std::string, std::vector<int64_t>>> llmc_order(int64_t Vp, int64_t T,
                                                                     int64_t L, int64_t C) {
  return {{"wte", {Vp, C}},
          {"wpe", {T, C}},
          {"ln1.w", {L, C}},
          {"ln1.b", {L, C}},
          {"attn.qkv.w", {L, 3 * C, C}},
          {"attn.qkv.b", {L, 3 * C}},
          {"attn.proj.w", {L, C, C}},
          {"attn.proj.b", {L, C}},
          {"ln2.w", {L, C}},
          {"ln2.b", {L, C}},
          {"mlp.fc.w", {L, 4 * C, C}},
          {"mlp.fc.b", {L, 4 * C}},
          {"mlp.proj.w", {L, C, 4 * C}},
          {"mlp.proj.b", {L, C}},
          {"ln_f.w", {C}},
          {"ln_f.b", {C}}};
}

}  // namespace

// llm.c's GPT-2 file: 256 int32 (magic 20240326, version 3 = fp32 or 5 = bf16, max_seq_len,
// vocab_size, num_layers, num_heads, channels, padded_vocab_size) then the tensors in its order,
// each layer-stacked, weights [out, in].
ExternalModel read_llmc(const fs::path& file) {
  const std::string where = "llm.c model '" + file.string() + "': ";
  std::ifstream in = open_input(file, "llm.c model");
  int32_t h[256];
  if (!in.read(reinterpret_cast<char*>(h), sizeof h))
    throw RuntimeError(where + "shorter than its 1024-byte header");
  if (h[0] != 20240326)
    throw RuntimeError(where + "bad magic " + std::to_string(h[0]) + " (expected 20240326)");
  if (h[1] != 3 && h[1] != 5)
    throw RuntimeError(where + "version " + std::to_string(h[1]) +
                       " is not supported (3: fp32, 5: bf16)");
  const int64_t T = positive(h[2], "max_seq_len", where + "header's"),
                V = positive(h[3], "vocab_size", where + "header's");
  const int64_t L = positive(h[4], "num_layers", where + "header's"),
                H = positive(h[5], "num_heads", where + "header's");
  const int64_t C = positive(h[6], "channels", where + "header's"),
                Vp = positive(h[7], "padded_vocab_size", where + "header's");
  const int64_t width = h[1] == 3 ? 4 : 2;
  if (C % H != 0 || Vp < V)
    throw RuntimeError(where + "channels " + std::to_string(C) + " over " + std::to_string(H) +
                       " heads, vocabulary " + std::to_string(V) + " padded to " +
                       std::to_string(Vp) + ": not a GPT-2 shape");
  const std::vector<std::pair<std::string, std::vector<int64_t>>> order = llmc_order(Vp, T, L, C);
  int64_t total = 0;
  for (const auto& [n, s] : order) {
    int64_t k = 1;
    for (int64_t d : s) k *= d;
    total += k;
  }
  const uintmax_t expect = 1024 + static_cast<uintmax_t>(total * width);
  if (fs::file_size(file) != expect)
    throw RuntimeError(where + "the header's shape needs " + std::to_string(expect) +
                       " bytes, the file has " + std::to_string(fs::file_size(file)));
  Builder b;
  b.m.source =
      std::string("llm.c (version ") + std::to_string(h[1]) + (h[1] == 3 ? ", fp32)" : ", bf16)");
  b.m.model_toml =
      toml_line("n_layer", std::to_string(L)) + toml_line("n_head", std::to_string(H)) +
      toml_line("d_model", std::to_string(C)) + toml_line("d_ff", std::to_string(4 * C)) +
      toml_line("vocab_size", std::to_string(V)) + toml_line("seq_len", std::to_string(T)) +
      toml_line("max_positions", std::to_string(T)) + toml_line("positions", "\"learned\"") +
      toml_line("norm", "\"layernorm\"") + toml_line("mlp", "\"gelu\"") +
      toml_line("bias", "true") + toml_line("tied_embeddings", "true");
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
        b.put("h" + std::to_string(l) + "." + name, s,
              std::vector<float>(data.begin() + l * per, data.begin() + (l + 1) * per));
    }
  }
  return b.m;
}

}  // namespace loom::ckpt::convert
